//! One fiber: a Hyperlight sandbox built from a template, serving one request
//! at a time and restored to the template after every request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperlight_host::hypervisor::InterruptHandle;
use hyperlight_host::{HyperlightError, Sandbox, SandboxStatus};
use lampyr_abi::{DecodeError, HANDLE_FUNCTION, Response, decode_response};

use super::template::Template;
use super::watchdog::{CallState, KillReason};

/// A warm sandbox of one Revision.
pub struct Fiber {
    sandbox: Sandbox,
    interrupt: Arc<dyn InterruptHandle>,
}

/// How one guest call ended, before mapping to HTTP.
#[derive(Debug)]
pub enum CallOutcome {
    /// The guest answered with a well-formed response.
    Answered(Response),
    /// The guest's output is not a valid response frame.
    BadResponse(DecodeError),
    /// Interrupted at the request deadline.
    TimedOut,
    /// Interrupted because the caller went away.
    Abandoned,
    /// The guest panicked or aborted.
    Crashed(String),
    /// Any other failure of the call.
    Failed(String),
    /// No fiber could start: the instance's capacity is taken (no guest code ran).
    NoCapacity(String),
}

/// What to do with a fiber after a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Restored to the template: reuse it.
    Reuse,
    /// Broken or suspicious: drop it.
    Discard,
}

impl Fiber {
    /// Builds a fiber from `template` (no guest code runs).
    pub fn new(template: &Template) -> Result<Self, HyperlightError> {
        Ok(Self::of(template.new_sandbox()?))
    }

    /// The first fiber of a Revision waking from zero: from a spare sandbox when one is
    /// ready ([`Template::waking_sandbox`]), so no VM is built on the request's path.
    pub fn waking(template: &Template) -> Result<Self, HyperlightError> {
        Ok(Self::of(template.waking_sandbox()?))
    }

    fn of(sandbox: hyperlight_host::Sandbox) -> Self {
        let interrupt = sandbox.interrupt_handle();
        Fiber { sandbox, interrupt }
    }

    /// The handle a watchdog uses to interrupt this fiber's call.
    pub fn interrupt_handle(&self) -> Arc<dyn InterruptHandle> {
        Arc::clone(&self.interrupt)
    }

    /// Runs one request frame; returns the outcome and the time spent in the guest.
    pub fn call(&mut self, frame: Vec<u8>, template: &Template, state: &CallState) -> (CallOutcome, Duration) {
        let started = Instant::now();
        let sandbox = &mut self.sandbox;
        let result = super::host::with_call(state.interruption(), || sandbox.call::<Vec<u8>>(HANDLE_FUNCTION, frame));
        let guest_time = started.elapsed();
        let outcome = match result {
            Ok(bytes) => match decode_response(&bytes, &template.response_limits()) {
                Ok(resp) => CallOutcome::Answered(resp),
                Err(e) => CallOutcome::BadResponse(e),
            },
            Err(HyperlightError::ExecutionCanceledByHost()) => match state.reason() {
                KillReason::CallerGone => CallOutcome::Abandoned,
                _ => CallOutcome::TimedOut,
            },
            Err(HyperlightError::GuestAborted(code, msg)) => CallOutcome::Crashed(format!("guest aborted ({code}): {msg}")),
            Err(e) => CallOutcome::Failed(e.to_string()),
        };
        (outcome, guest_time)
    }

    /// Restores the fiber to the template after a call. Decided on the
    /// sandbox status, not the error: anything not `Ready` after a restore,
    /// and any fiber that returned malformed output, is discarded.
    pub fn recycle(&mut self, template: &Template, malformed_output: bool) -> Disposition {
        if malformed_output || self.sandbox.status() == SandboxStatus::Unrecoverable {
            return Disposition::Discard;
        }
        match self.sandbox.restore(Arc::clone(template.snapshot())) {
            Ok(()) if self.sandbox.status() == SandboxStatus::Ready => Disposition::Reuse,
            Ok(()) => Disposition::Discard,
            Err(e) => {
                tracing::warn!(error = %e, "restoring a fiber failed; discarding it");
                Disposition::Discard
            }
        }
    }
}
