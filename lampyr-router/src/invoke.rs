//! Why a request got no guest answer, whichever backend served it, and the bounded
//! outcome labels its metrics use.

/// Every outcome a request can have, as labelled in `lampyr_fiber_requests_total`.
pub const OUTCOMES: [&str; 13] = [
    "ok",
    "bad_request",
    "request_timeout",
    "bad_response",
    "timeout",
    "abandoned",
    "crash",
    "error",
    "too_large",
    "overloaded",
    "queue_timeout",
    "unavailable",
    "no_capacity",
];

/// Why a request did not get a guest's answer; each maps to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// The request body exceeds the artifact's limit.
    #[error("request body of {size} bytes exceeds this service's limit of {max} bytes")]
    RequestTooLarge {
        /// Body size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The request body could not be read (the client broke it off or sent it malformed).
    #[error("{0}")]
    BadRequest(String),
    /// The request body was still arriving when the request deadline passed.
    #[error("the request body did not arrive before the request deadline")]
    RequestTimeout,
    /// Every fiber is busy and the wait queue is full.
    #[error("overloaded: all fibers busy and {capacity} requests already waiting")]
    Overloaded {
        /// Queue capacity.
        capacity: usize,
    },
    /// No fiber became free before the request deadline.
    #[error("no fiber became free before the request deadline")]
    QueueTimeout,
    /// The guest ran past the request deadline and was interrupted.
    #[error("the guest did not answer before the request deadline")]
    Timeout,
    /// The caller went away; the guest was interrupted.
    #[error("the caller went away before the guest answered")]
    Abandoned,
    /// The guest panicked or aborted.
    #[error("the guest crashed: {0}")]
    Crashed(String),
    /// The guest's output is not a valid response.
    #[error("the guest returned a malformed response: {0}")]
    BadResponse(lampyr_abi::DecodeError),
    /// The answer is not valid HTTP (a status or header no server may send).
    #[error("{0}")]
    InvalidResponse(String),
    /// The fiber failed for another reason.
    #[error("the fiber failed: {0}")]
    FiberFailed(String),
    /// No fiber could be started.
    #[error("no fiber available: {0}")]
    Unavailable(String),
    /// No fiber could be started within the instance's fiber slots and memory.
    #[error("no fiber slot free: {0}")]
    NoCapacity(String),
}

impl InvokeError {
    /// The HTTP status a client receives.
    pub fn http_status(&self) -> u16 {
        match self {
            InvokeError::RequestTooLarge { .. } => 413,
            InvokeError::BadRequest(_) => 400,
            InvokeError::RequestTimeout => 408,
            InvokeError::Overloaded { .. } | InvokeError::Unavailable(_) | InvokeError::NoCapacity(_) => 503,
            InvokeError::QueueTimeout | InvokeError::Timeout => 504,
            InvokeError::Crashed(_) | InvokeError::BadResponse(_) | InvokeError::InvalidResponse(_) | InvokeError::FiberFailed(_) => 502,
            // Nobody reads it; 499 is the conventional "client closed request" code.
            InvokeError::Abandoned => 499,
        }
    }

    /// Bounded outcome name for metric labels.
    pub fn outcome(&self) -> &'static str {
        match self {
            InvokeError::RequestTooLarge { .. } => "too_large",
            InvokeError::BadRequest(_) => "bad_request",
            InvokeError::RequestTimeout => "request_timeout",
            InvokeError::Overloaded { .. } => "overloaded",
            InvokeError::QueueTimeout => "queue_timeout",
            InvokeError::Timeout => "timeout",
            InvokeError::Abandoned => "abandoned",
            InvokeError::Crashed(_) => "crash",
            InvokeError::BadResponse(_) | InvokeError::InvalidResponse(_) => "bad_response",
            InvokeError::FiberFailed(_) => "error",
            InvokeError::Unavailable(_) => "unavailable",
            InvokeError::NoCapacity(_) => "no_capacity",
        }
    }

    /// Whether the request may be retried elsewhere unchanged (no guest code ran).
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            InvokeError::Overloaded { .. } | InvokeError::QueueTimeout | InvokeError::Unavailable(_) | InvokeError::NoCapacity(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_a_listed_label() {
        let errors = [
            InvokeError::RequestTooLarge { size: 2, max: 1 },
            InvokeError::BadRequest(String::new()),
            InvokeError::RequestTimeout,
            InvokeError::InvalidResponse(String::new()),
            InvokeError::Overloaded { capacity: 1 },
            InvokeError::QueueTimeout,
            InvokeError::Timeout,
            InvokeError::Abandoned,
            InvokeError::Crashed(String::new()),
            InvokeError::BadResponse(lampyr_abi::DecodeError::BadMagic { expected: *b"LMPR" }),
            InvokeError::FiberFailed(String::new()),
            InvokeError::Unavailable(String::new()),
            InvokeError::NoCapacity(String::new()),
        ];
        for e in &errors {
            assert!(OUTCOMES.contains(&e.outcome()), "{e:?}'s outcome {} is not in OUTCOMES", e.outcome());
        }
        let mut named: Vec<&str> = errors.iter().map(InvokeError::outcome).chain(["ok"]).collect();
        named.sort_unstable();
        named.dedup();
        let mut listed = OUTCOMES.to_vec();
        listed.sort_unstable();
        assert_eq!(listed, named, "OUTCOMES is every error's outcome and ok");
    }
}
