//! Go duration strings (`time.ParseDuration`), as Knative annotations use them.
//!
//! The syntax is an optional sign and one or more `<number><unit>` parts, e.g.
//! `60s`, `1m30s`, `1.5h`, `-2m`; units are `ns`, `us` (`µs`, `μs`), `ms`, `s`,
//! `m` and `h`. A bare `0` is also accepted. Values must fit Go's signed 64-bit
//! nanosecond range.

use std::time::Duration;

/// Why a string is not a Go duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The text does not follow Go's duration syntax.
    #[error("invalid duration {0:?}: expected a Go duration like \"60s\" or \"1m30s\"")]
    Syntax(String),
    /// A part has no unit (`"60"`).
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    /// A part has a unit Go does not know.
    #[error("unknown unit {unit:?} in duration {text:?}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole duration text.
        text: String,
    },
    /// The value does not fit Go's 64-bit nanosecond range.
    #[error("duration {0:?} out of range")]
    Overflow(String),
}

/// A parsed Go duration: a sign and a magnitude.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoDuration {
    /// The value was negative (and not zero).
    pub negative: bool,
    /// The absolute value.
    pub magnitude: Duration,
}

impl GoDuration {
    /// The duration if it is not negative.
    pub fn non_negative(self) -> Option<Duration> {
        (!self.negative).then_some(self.magnitude)
    }
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parse a Go duration string.
pub fn parse_go_duration(text: &str) -> Result<GoDuration, DurationError> {
    let syntax = || DurationError::Syntax(text.to_owned());
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(GoDuration { negative: false, magnitude: Duration::ZERO });
    }
    if rest.is_empty() {
        return Err(syntax());
    }
    // Go's limit: 1<<63 - 1 nanoseconds, or 1<<63 when negative.
    let limit: u128 = if negative { 1 << 63 } else { (1 << 63) - 1 };
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (int_part, frac_part, after) = crate::quantity::split_decimal(rest);
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(syntax());
        }
        let unit_len = after.char_indices().find(|&(_, c)| c == '.' || c.is_ascii_digit()).map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(text.to_owned()));
        }
        let unit_ns = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit { unit: unit.to_owned(), text: text.to_owned() })?;
        let overflow = || DurationError::Overflow(text.to_owned());
        let int: u128 = if int_part.is_empty() {
            0
        } else if int_part.len() > 30 {
            return Err(overflow());
        } else {
            int_part.parse().map_err(|_| syntax())?
        };
        let mut part = int.checked_mul(unit_ns).ok_or_else(overflow)?;
        // Fractional digits beyond nanosecond precision cannot change the
        // result for any unit up to an hour (3.6e12 ns); keep 20 of them.
        let frac_digits = &frac_part[..frac_part.len().min(20)];
        if !frac_digits.is_empty() {
            let frac: u128 = frac_digits.parse().map_err(|_| syntax())?;
            let scale = 10u128.pow(frac_digits.len() as u32);
            part = part.checked_add(frac * unit_ns / scale).ok_or_else(overflow)?;
        }
        total = total.checked_add(part).ok_or_else(overflow)?;
        if total > limit {
            return Err(overflow());
        }
        rest = after;
    }
    let secs = (total / 1_000_000_000) as u64;
    let nanos = (total % 1_000_000_000) as u32;
    Ok(GoDuration { negative: negative && total != 0, magnitude: Duration::new(secs, nanos) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Duration {
        parse_go_duration(text).ok().and_then(GoDuration::non_negative).unwrap_or_else(|| panic!("{text} should parse as non-negative"))
    }

    #[test]
    fn go_examples() {
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("+0"), Duration::ZERO);
        assert_eq!(ok("-0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("60s"), Duration::from_secs(60));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("5.s"), Duration::from_secs(5));
        assert_eq!(ok("1h2m3s4ms5us6ns"), Duration::new(3723, 4_005_006));
        assert_eq!(ok("3\u{b5}s"), Duration::from_micros(3));
        assert_eq!(ok("3\u{3bc}s"), Duration::from_micros(3));
        assert_eq!(ok("0.000000001s"), Duration::from_nanos(1));
        assert_eq!(ok("2562047h"), Duration::from_secs(2_562_047 * 3600));
    }

    #[test]
    fn negative() {
        let d = parse_go_duration("-1m").ok();
        assert_eq!(d, Some(GoDuration { negative: true, magnitude: Duration::from_secs(60) }));
        assert_eq!(d.and_then(GoDuration::non_negative), None);
    }

    #[test]
    fn errors() {
        for bad in ["", "-", "s", ".s", "1..5s", "1.5.s", " 1s", "1s ", "1 s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should fail");
        }
        assert_eq!(parse_go_duration("60"), Err(DurationError::MissingUnit("60".into())));
        assert_eq!(parse_go_duration("1d"), Err(DurationError::UnknownUnit { unit: "d".into(), text: "1d".into() }));
        assert_eq!(parse_go_duration("9999999h"), Err(DurationError::Overflow("9999999h".into())));
    }
}
