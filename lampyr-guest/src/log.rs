//! Structured logging through the host: a message and `key=value` fields at a level.
//! In a fiber the host writes them to its log (`tracing`, target `lampyr_guest`); on the
//! host (tests, `cargo run`) they go to stderr.
//!
//! ```
//! # let (items, req) = ([1, 2], lampyr_guest::host::request("GET", "/items"));
//! lampyr_guest::info!("listed items", count = items.len(), path = req.path());
//! ```

use alloc::string::String;
use core::fmt::{Display, Write as _};

/// How much a log event matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u32)]
pub enum Level {
    /// Something failed.
    Error = 1,
    /// Something unexpected that the service survived.
    Warn = 2,
    /// What the service did.
    Info = 3,
    /// Detail for finding a problem.
    Debug = 4,
}

impl Level {
    /// Lower-case name, as written in a log line.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

/// Logs `message` with `fields` at `level` (what the macros call).
pub fn event(level: Level, message: &str, fields: &[(&str, &dyn Display)]) {
    let fields = logfmt(fields);
    #[cfg(target_os = "none")]
    crate::fiber::log(level as u32, String::from(message), fields);
    #[cfg(not(target_os = "none"))]
    crate::host::log(level, message, &fields);
}

/// `key=value` pairs separated by spaces; a value with spaces, quotes or `=` (or empty) is quoted.
pub fn logfmt(fields: &[(&str, &dyn Display)]) -> String {
    let mut line = String::new();
    for (key, value) in fields {
        let mut text = String::new();
        let _ = write!(text, "{value}");
        if !line.is_empty() {
            line.push(' ');
        }
        let plain = !text.is_empty() && !text.contains([' ', '"', '=', '\n', '\t']);
        if plain {
            let _ = write!(line, "{key}={text}");
        } else {
            let _ = write!(line, "{key}={text:?}");
        }
    }
    line
}

/// What [`error!`](crate::error), [`warn!`](crate::warn), [`info!`](crate::info) and
/// [`debug!`](crate::debug) expand to.
#[doc(hidden)]
#[macro_export]
macro_rules! __log_event {
    ($level:ident, $message:expr $(, $key:ident = $value:expr)* $(,)?) => {
        $crate::log::event($crate::log::Level::$level, $message, &[$((stringify!($key), &$value as &dyn ::core::fmt::Display)),*])
    };
}

/// Logs at [`Level::Error`]: `error!("message", key = value, ...)`.
#[macro_export]
macro_rules! error {
    ($($event:tt)+) => { $crate::__log_event!(Error, $($event)+) };
}

/// Logs at [`Level::Warn`]: `warn!("message", key = value, ...)`.
#[macro_export]
macro_rules! warn {
    ($($event:tt)+) => { $crate::__log_event!(Warn, $($event)+) };
}

/// Logs at [`Level::Info`]: `info!("message", key = value, ...)`.
#[macro_export]
macro_rules! info {
    ($($event:tt)+) => { $crate::__log_event!(Info, $($event)+) };
}

/// Logs at [`Level::Debug`]: `debug!("message", key = value, ...)`.
#[macro_export]
macro_rules! debug {
    ($($event:tt)+) => { $crate::__log_event!(Debug, $($event)+) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_logfmt_with_quoting_where_needed() {
        let line = logfmt(&[("count", &3), ("path", &"/a b"), ("empty", &""), ("ok", &true)]);
        assert_eq!(line, r#"count=3 path="/a b" empty="" ok=true"#);
    }
}
