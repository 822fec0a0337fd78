//! Kubernetes resource quantities (`128Mi`, `1G`, `500m`, `1e9`, `1.5Gi`).
//!
//! Grammar: `<sign>?<digits>[.<digits>]<suffix>` where the suffix is a binary
//! SI suffix (`Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`), a decimal SI suffix (`n`,
//! `u`, `m`, none, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal exponent
//! (`e3`, `E-2`). Values are kept exact (as a fraction) so that byte counts
//! round the way Kubernetes rounds them: up, to the next integer.

/// Why a string is not a usable quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not follow the quantity grammar.
    #[error("invalid quantity {0:?}: expected a number with an optional suffix like 128Mi, 1G or 500m")]
    Syntax(String),
    /// The quantity is negative.
    #[error("quantity {0:?} is negative")]
    Negative(String),
    /// The quantity is larger than Kubernetes allows (2^63 - 1).
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
}

/// A non-negative quantity, exact: `numerator / denominator`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParsedQuantity {
    numerator: u128,
    denominator: u128,
}

/// Kubernetes caps quantities at 2^63 - 1.
const MAX_QUANTITY: u128 = i64::MAX as u128;

impl ParsedQuantity {
    /// The value rounded up to an integer, as Kubernetes' `Value()` does.
    pub fn ceil(&self) -> u64 {
        // `parse_quantity` guarantees the value is at most 2^63 - 1.
        self.numerator.div_ceil(self.denominator) as u64
    }

    /// Whether the quantity is exactly zero.
    pub fn is_zero(&self) -> bool {
        self.numerator == 0
    }

    /// The value as a float (for display and coarse comparisons).
    pub fn as_f64(&self) -> f64 {
        self.numerator as f64 / self.denominator as f64
    }
}

/// Parse a Kubernetes quantity; negative values are refused.
pub fn parse_quantity(text: &str) -> Result<ParsedQuantity, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_owned());
    let too_large = || QuantityError::TooLarge(text.to_owned());
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (int_part, frac_part, suffix) = split_decimal(rest);
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(syntax());
    }
    // Leading zeros carry no value; past that, 30 significant digits is far
    // beyond anything representable below 2^63 with 9 decimal places.
    let digits: String = format!("{int_part}{frac_part}");
    let significant = digits.trim_start_matches('0');
    if significant.len() > 30 {
        return Err(too_large());
    }
    let mantissa: u128 = if significant.is_empty() { 0 } else { significant.parse().map_err(|_| syntax())? };
    // value = mantissa * 10^-frac_len * 2^bin * 10^dec
    let (bin_exp, dec_exp): (u32, i32) = match suffix {
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "" => (0, 0),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        s if s.starts_with(['e', 'E']) => {
            let exp = &s[1..];
            let body = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) || body.len() > 3 {
                return Err(syntax());
            }
            (0, exp.parse().map_err(|_| syntax())?)
        }
        _ => return Err(syntax()),
    };
    if negative && mantissa != 0 {
        return Err(QuantityError::Negative(text.to_owned()));
    }
    if mantissa == 0 {
        return Ok(ParsedQuantity { numerator: 0, denominator: 1 });
    }
    let dec_exp = dec_exp - frac_part.len() as i32;
    let mut numerator = mantissa.checked_mul(1u128 << bin_exp).ok_or_else(too_large)?;
    let mut denominator: u128 = 1;
    if dec_exp >= 0 {
        let factor = 10u128.checked_pow(dec_exp as u32).ok_or_else(too_large)?;
        numerator = numerator.checked_mul(factor).ok_or_else(too_large)?;
    } else {
        // A denominator past 10^38 means the value is below 10^-8 and rounds
        // up to 1 (or is exactly 0, handled above).
        match 10u128.checked_pow(dec_exp.unsigned_abs()) {
            Some(d) => denominator = d,
            None => {
                return Ok(ParsedQuantity { numerator: 1, denominator: u128::MAX });
            }
        }
    }
    if numerator.div_ceil(denominator) > MAX_QUANTITY {
        return Err(too_large());
    }
    Ok(ParsedQuantity { numerator, denominator })
}

/// Splits `digits[.digits]rest` into its integer digits, fraction digits and the rest.
pub(crate) fn split_decimal(text: &str) -> (&str, &str, &str) {
    let int_len = text.bytes().take_while(u8::is_ascii_digit).count();
    let (int_part, after) = text.split_at(int_len);
    match after.strip_prefix('.') {
        Some(after) => {
            let n = after.bytes().take_while(u8::is_ascii_digit).count();
            let (frac_part, rest) = after.split_at(n);
            (int_part, frac_part, rest)
        }
        None => (int_part, "", after),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(text: &str) -> u64 {
        parse_quantity(text).unwrap_or_else(|e| panic!("{text}: {e}")).ceil()
    }

    #[test]
    fn byte_counts() {
        let table: &[(&str, u64)] = &[
            ("0", 0),
            ("1", 1),
            ("+1", 1),
            ("128974848", 128_974_848),
            ("128Mi", 128 << 20),
            ("1Ki", 1024),
            ("1Gi", 1 << 30),
            ("1.5Gi", 3 << 29),
            ("0.5Ki", 512),
            ("1G", 1_000_000_000),
            ("256M", 256_000_000),
            ("1k", 1000),
            ("129e6", 129_000_000),
            ("129E6", 129_000_000),
            ("1e3", 1000),
            ("123E-1", 13),
            ("1E", 1_000_000_000_000_000_000),
            ("100m", 1),
            ("1500m", 2),
            ("1n", 1),
            ("1.", 1),
            (".5k", 500),
            ("0.000Mi", 0),
            ("-0", 0),
            ("7Ei", 7 << 60),
        ];
        for (text, want) in table {
            assert_eq!(bytes(text), *want, "{text}");
        }
    }

    #[test]
    fn invalid() {
        for text in ["", "Mi", ".", "1.2.3", "1Mb", "1 Mi", " 1", "1KiB", "1e", "1e+", "0x10", "1i", "1mi"] {
            assert_eq!(parse_quantity(text), Err(QuantityError::Syntax(text.into())), "{text:?}");
        }
        assert_eq!(parse_quantity("-1Mi"), Err(QuantityError::Negative("-1Mi".into())));
        assert_eq!(parse_quantity("8Ei"), Err(QuantityError::TooLarge("8Ei".into())));
        assert_eq!(parse_quantity("1e100"), Err(QuantityError::TooLarge("1e100".into())));
    }

    #[test]
    fn cpu_like_values() {
        let q = parse_quantity("250m").ok();
        assert_eq!(q.map(|q| q.as_f64()), Some(0.25));
        assert!(parse_quantity("0").is_ok_and(|q| q.is_zero()));
    }
}
