//! The Revision's environment (its `env`, resolved ConfigMap and Secret references
//! included) and arguments, set before the first request, and typed configuration on top.

use alloc::format;
use alloc::string::String;

use lampyr_abi::Env;

use crate::Error;

static ENV: spin::Once<Env> = spin::Once::new();

/// Sets the environment once (the host's configure call; `host::main` on the host).
pub(crate) fn install(env: Env) {
    ENV.call_once(|| env);
}

/// The environment in force: a host test's [`crate::host::with_env`] first, then the installed one.
fn current() -> Option<&'static Env> {
    #[cfg(not(target_os = "none"))]
    if let Some(env) = crate::host::test_env() {
        return Some(env);
    }
    ENV.get()
}

/// Value of the Revision environment variable `name`, if set.
pub fn var(name: &str) -> Option<&'static str> {
    current().and_then(|env| env.get(name))
}

/// Every Revision environment variable, in declaration order.
pub fn vars() -> &'static [(String, String)] {
    current().map(|env| env.vars.as_slice()).unwrap_or(&[])
}

/// The Revision's arguments: its container's `command`, then `args` (empty when none).
pub fn args() -> &'static [String] {
    current().map(|env| env.args.as_slice()).unwrap_or(&[])
}

/// The variable `name`, or an [`Error`] (500) naming it when it is not set: configuration
/// a handler cannot work without.
pub fn require(name: &str) -> Result<&'static str, Error> {
    var(name).ok_or_else(|| Error::internal(format!("configuration {name} is not set")))
}

/// The variable `name` parsed as `T` (`None` when unset); a value that does not parse is an
/// [`Error`] (500) naming the variable, its value and why.
pub fn parse<T>(name: &str) -> Result<Option<T>, Error>
where
    T: core::str::FromStr,
    T::Err: core::fmt::Display,
{
    match var(name) {
        None => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|e| Error::internal(format!("configuration {name}={text:?} is not valid: {e}"))),
    }
}

/// The variable `name` parsed as `T`, or `default` when unset.
pub fn parse_or<T>(name: &str, default: T) -> Result<T, Error>
where
    T: core::str::FromStr,
    T::Err: core::fmt::Display,
{
    Ok(parse(name)?.unwrap_or(default))
}
