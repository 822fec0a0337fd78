//! A Revision's `httpGet` readiness probe, run against its template before the
//! Revision serves: one request to a fiber.
//!
//! Every fiber is restored from the same template after every request, so the
//! answer one fiber gives is the answer all of them give: a probe that passes
//! once holds for the template's life, and one the guest answers with an error
//! keeps failing. Attempts that time out or find no free fiber are retried, up
//! to the probe's `failureThreshold`.

use std::time::Duration;

use lampyr_abi::{Header, Request};
use lampyr_api::policy::ReadinessCheck;
use lampyr_router::InvokeError;
use tokio::time::Instant;

use super::pool::{Answer, FiberPool};

/// Why a template is not ready to serve.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// The guest answered the probe with a status outside 200–399.
    #[error("readiness probe GET {path} answered {status}{}: every fiber restores to this template, so none would pass", excerpt(body))]
    Answered {
        /// The probed path.
        path: String,
        /// The status the guest answered.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
    /// Every attempt failed before the guest answered (timed out, no fiber free).
    #[error("readiness probe GET {path} got no answer in {attempts} attempts of {timeout:?} (failureThreshold, timeoutSeconds): {last}")]
    NoAnswer {
        /// The probed path.
        path: String,
        /// Attempts made.
        attempts: u32,
        /// Time allowed for each.
        timeout: Duration,
        /// What the last attempt ended with.
        last: InvokeError,
    },
}

fn excerpt(body: &str) -> String {
    if body.is_empty() { String::new() } else { format!(" ({})", body.trim_end()) }
}

/// Sends `check`'s request to a fiber of `pool` until the guest answers it; Ok when
/// the answer is a 2xx or 3xx.
pub async fn check_ready(pool: &FiberPool, check: &ReadinessCheck) -> Result<(), NotReady> {
    let attempts = check.failure_threshold.max(1);
    let mut last = None;
    for attempt in 1..=attempts {
        // A streamed answer is judged by its head, as the kubelet judges by status; its
        // body is dropped unread (which stops the guest).
        let answer = pool.invoke_streaming(probe_request(check), Instant::now() + check.timeout).await.map(|(a, _)| match a {
            Answer::Whole(resp) => resp,
            Answer::Streamed { head, .. } => head,
        });
        match answer {
            Ok(resp) if (200..400).contains(&resp.status) => return Ok(()),
            Ok(resp) => {
                let body = String::from_utf8_lossy(&resp.body[..resp.body.len().min(200)]).into_owned();
                return Err(NotReady::Answered { path: check.path.clone(), status: resp.status, body });
            }
            Err(e) => {
                tracing::debug!(path = %check.path, attempt, error = %e, "readiness probe attempt failed");
                last = Some(e);
            }
        }
    }
    let last = last.unwrap_or(InvokeError::Timeout);
    Err(NotReady::NoAnswer { path: check.path.clone(), attempts, timeout: check.timeout, last })
}

/// The probe's GET, with its `httpHeaders` after the defaults a kubelet sends.
fn probe_request(check: &ReadinessCheck) -> Request {
    let mut headers = vec![header("user-agent", "kube-probe/lampyr"), header("accept", "*/*")];
    for h in &check.headers {
        headers.retain(|d| !d.name.eq_ignore_ascii_case(&h.name));
        headers.push(header(&h.name, &h.value));
    }
    Request { method: "GET".into(), uri: check.path.clone(), headers, ..Request::default() }
}

fn header(name: &str, value: &str) -> Header {
    Header { name: name.to_string(), value: value.as_bytes().to_vec() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lampyr_api::policy::EnvEntry;

    #[test]
    fn the_probes_headers_replace_the_defaults_of_the_same_name() {
        let check = ReadinessCheck {
            path: "/healthz".into(),
            headers: vec![EnvEntry { name: "User-Agent".into(), value: "mine".into() }],
            timeout: Duration::from_secs(1),
            failure_threshold: 3,
        };
        let req = probe_request(&check);
        let names: Vec<_> = req.headers.iter().map(|h| (h.name.as_str(), h.value.as_slice())).collect();
        assert_eq!(names, [("accept", &b"*/*"[..]), ("User-Agent", &b"mine"[..])]);
        assert_eq!((req.method.as_str(), req.uri.as_str()), ("GET", "/healthz"));
    }
}
