//! Resource quantities parsed and printed like `resource.Quantity`
//! (upstream `staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go`):
//! `<sign><digits>[.<digits>]<suffix>` with binary (`Ki`..`Ei`), decimal
//! (`n`, `u`, `m`, ``, `k`..`E`) or exponent (`e3`, `E-2`) suffixes; values
//! are exact, rounded up to the nano; the canonical form keeps the suffix
//! family and uses the largest suffix that loses nothing (`1.5` is `1500m`,
//! `1.5Gi` is `1536Mi`).
//!
//! Values are held as a count of nano-units in an `i128`, saturating far
//! beyond anything a container asks for. Validation, the schema decoder, the
//! scheduler, the kubelet's eviction message and the CLI's node sizes all
//! read quantities through this one parser.

use std::cmp::Ordering;
use std::fmt;

/// The suffix family a quantity was written in (kept when printing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `1k`, `500m`, `2`.
    DecimalSi,
    /// `1Ki`, `512Mi`.
    BinarySi,
    /// `1e3`.
    DecimalExponent,
}

/// A parsed quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

/// Why a string is not a quantity (upstream's three errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantityError {
    /// `ErrFormatWrong`.
    FormatWrong,
    /// `ErrNumeric`.
    Numeric,
    /// `ErrSuffix`.
    Suffix,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuantityError::FormatWrong => {
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            }
            QuantityError::Numeric => "unable to parse numeric part of quantity",
            QuantityError::Suffix => "unable to parse quantity's suffix",
        })
    }
}

impl std::error::Error for QuantityError {}

const SUFFIX_CHARS: &str = "eEinumkKMGTP";

/// Splits like upstream's scanner: sign, integer digits, fraction digits,
/// suffix.
fn scan(s: &str) -> Result<(bool, &str, &str, &str), QuantityError> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < b.len() && b[pos] == b'0' {
        pos += 1;
    }
    let start = pos;
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = &s[start..pos];
    let mut denom = "";
    if pos < b.len() && b[pos] == b'.' {
        pos += 1;
        let d0 = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[d0..pos];
    }
    let suffix_start = pos;
    while pos < b.len() && SUFFIX_CHARS.as_bytes().contains(&b[pos]) {
        pos += 1;
    }
    if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < b.len() && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < b.len() {
        return Err(QuantityError::FormatWrong);
    }
    Ok((positive, num, denom, &s[suffix_start..]))
}

/// (base, exponent, format) of a suffix.
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let binary = [
        ("Ki", 10),
        ("Mi", 20),
        ("Gi", 30),
        ("Ti", 40),
        ("Pi", 50),
        ("Ei", 60),
    ];
    let decimal = [
        ("n", -9),
        ("u", -6),
        ("m", -3),
        ("", 0),
        ("k", 3),
        ("M", 6),
        ("G", 9),
        ("T", 12),
        ("P", 15),
        ("E", 18),
    ];
    if let Some((_, e)) = binary.iter().find(|(s, _)| *s == suffix) {
        return Some((2, *e, Format::BinarySi));
    }
    if let Some((_, e)) = decimal.iter().find(|(s, _)| *s == suffix) {
        return Some((10, *e, Format::DecimalSi));
    }
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))?;
    let e: i32 = rest.parse().ok()?;
    Some((10, e, Format::DecimalExponent))
}

fn pow10(e: u32) -> Option<i128> {
    10i128.checked_pow(e)
}

/// Parses a quantity string.
pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
    if s.is_empty() {
        return Err(QuantityError::FormatWrong);
    }
    let (positive, num, denom, suffix) = scan(s)?;
    let (base, exp, format) = interpret(suffix).ok_or(QuantityError::Suffix)?;
    // digits = num ++ denom as one integer; value = digits * 10^-len(denom) * base^exp
    let mut mantissa: i128 = 0;
    let mut saturated = false;
    for c in num.bytes().chain(denom.bytes()) {
        match mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(c - b'0')))
        {
            Some(m) => mantissa = m,
            None => {
                saturated = true;
                break;
            }
        }
    }
    let denom_len = i32::try_from(denom.len()).map_err(|_| QuantityError::Numeric)?;
    // nanos = mantissa * 10^(9 - denom_len [+ exp]) [* 2^exp]
    let mut scale10 = 9 - denom_len;
    let mut two_exp = 0u32;
    if base == 10 {
        scale10 += exp;
    } else {
        two_exp = exp as u32;
    }
    let nanos = if saturated {
        i128::MAX
    } else {
        let mut v = mantissa;
        if two_exp > 0 {
            v = v.checked_mul(1i128 << two_exp).unwrap_or(i128::MAX);
        }
        if scale10 >= 0 {
            match pow10(scale10 as u32).and_then(|p| v.checked_mul(p)) {
                Some(x) => x,
                None if v == 0 => 0,
                None => i128::MAX,
            }
        } else {
            // round up (away from zero) to the nano
            match pow10(scale10.unsigned_abs()) {
                Some(p) => (v + p - 1) / p,
                None => i128::from(v > 0),
            }
        }
    };
    let mut format = format;
    if format == Format::BinarySi && nanos > 0 && nanos < 1_000_000_000 {
        format = Format::DecimalSi;
    }
    Ok(Quantity {
        nanos: if positive { nanos } else { -nanos },
        format,
    })
}

impl Quantity {
    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The value in thousandths, rounded up (`MilliValue`).
    pub fn milli_value(&self) -> i128 {
        let p = 1_000_000i128;
        if self.nanos >= 0 {
            (self.nanos + p - 1) / p
        } else {
            self.nanos / p
        }
    }

    /// The value in whole units, rounded up (`Value`).
    pub fn value(&self) -> i128 {
        let p = 1_000_000_000i128;
        if self.nanos >= 0 {
            (self.nanos + p - 1) / p
        } else {
            self.nanos / p
        }
    }

    /// Rounded up to thousandths, as v1 defaulting does to every
    /// ResourceList (`SetDefaults_ResourceList`: `RoundUp(-3)`), so
    /// `1.0001` is stored as `1001m`.
    pub fn round_up_milli(self) -> Quantity {
        let p = 1_000_000i128;
        let nanos = if self.nanos >= 0 {
            self.nanos.saturating_add(p - 1) / p * p
        } else {
            self.nanos / p * p
        };
        Quantity { nanos, ..self }
    }

    /// The canonical string (`Quantity.String()`).
    pub fn canonical(&self) -> String {
        if self.nanos == 0 {
            return "0".to_string();
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let whole = abs.is_multiple_of(1_000_000_000);
        if self.format == Format::BinarySi && whole && abs / 1_000_000_000 >= 1024 {
            let mut v = abs / 1_000_000_000;
            let mut k = 0;
            let names = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            while k < 6 && v.is_multiple_of(1024) {
                v /= 1024;
                k += 1;
            }
            return format!("{sign}{v}{}", names[k]);
        }
        // decimal: the largest exponent (a multiple of 3) that divides exactly
        let mut e: i32 = -9;
        let mut m = abs;
        while m.is_multiple_of(1000) {
            m /= 1000;
            e += 3;
        }
        let suffix = match (self.format, e) {
            (Format::DecimalExponent, 0) => String::new(),
            (Format::DecimalExponent, e) => format!("e{e}"),
            (_, -9) => "n".into(),
            (_, -6) => "u".into(),
            (_, -3) => "m".into(),
            (_, 0) => String::new(),
            (_, 3) => "k".into(),
            (_, 6) => "M".into(),
            (_, 9) => "G".into(),
            (_, 12) => "T".into(),
            (_, 15) => "P".into(),
            (_, 18) => "E".into(),
            (_, e) => format!("e{e}"),
        };
        format!("{sign}{m}{suffix}")
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.nanos.cmp(&other.nanos))
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

/// A CPU quantity in millicores, rounded up as the scheduler counts it;
/// `None` when it is not a quantity or is negative.
pub fn cpu_millis(s: &str) -> Option<i64> {
    let q = parse(s).ok().filter(|q| !q.is_negative())?;
    i64::try_from(q.milli_value()).ok()
}

/// A memory quantity in bytes, rounded up; `None` when it is not a quantity
/// or is negative.
pub fn bytes(s: &str) -> Option<i64> {
    let q = parse(s).ok().filter(|q| !q.is_negative())?;
    i64::try_from(q.value()).ok()
}

/// Formats bytes the way the kubelet's eviction message shows memory
/// (`1Gi`, `512Mi`, `1500Ki`).
pub fn format_bytes(b: i64) -> String {
    for (suffix, shift) in [("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if b >= 1 << shift && b % (1 << shift) == 0 {
            return format!("{}{suffix}", b >> shift);
        }
    }
    if b >= 1 << 20 {
        return format!("{}Mi", b >> 20);
    }
    b.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> String {
        parse(s).unwrap().canonical()
    }

    #[test]
    fn canonical_forms() {
        assert_eq!(c("250m"), "250m");
        assert_eq!(c("1.5"), "1500m");
        assert_eq!(c("1.5Gi"), "1536Mi");
        assert_eq!(c("1Gi"), "1Gi");
        assert_eq!(c("1024Mi"), "1Gi");
        assert_eq!(c("2"), "2");
        assert_eq!(c("2000"), "2k");
        assert_eq!(c("0.1m"), "100u");
        assert_eq!(c("1e3"), "1e3");
        assert_eq!(c("1E6"), "1e6");
        assert_eq!(c("0"), "0");
        assert_eq!(c("000"), "0");
        assert_eq!(c("-1"), "-1");
        assert_eq!(c("+1"), "1");
        assert_eq!(c(".5"), "500m");
        assert_eq!(c("5."), "5");
        assert_eq!(c("512"), "512");
        assert_eq!(c("100Ki"), "100Ki");
        assert_eq!(c("0.5Ki"), "512");
        // more than nano precision rounds up
        assert_eq!(c("0.0000000001"), "1n");
    }

    #[test]
    fn defaulting_rounds_up_to_thousandths() {
        let r = |s: &str| parse(s).unwrap().round_up_milli().canonical();
        assert_eq!(r("1.0001"), "1001m");
        assert_eq!(r("0.1m"), "1m");
        assert_eq!(r("1n"), "1m");
        assert_eq!(r("250m"), "250m");
        assert_eq!(r("1Gi"), "1Gi");
        assert_eq!(r("0"), "0");
    }

    #[test]
    fn errors_like_upstream() {
        assert_eq!(parse(""), Err(QuantityError::FormatWrong));
        assert_eq!(parse("1.2.3"), Err(QuantityError::FormatWrong));
        assert_eq!(parse("abc"), Err(QuantityError::FormatWrong));
        assert_eq!(parse("1Q"), Err(QuantityError::FormatWrong));
        assert_eq!(parse("1mi"), Err(QuantityError::Suffix));
        assert_eq!(parse("1kk"), Err(QuantityError::Suffix));
        assert!(
            QuantityError::FormatWrong
                .to_string()
                .starts_with("quantities must match the regular expression")
        );
    }

    #[test]
    fn ordering_and_millis() {
        let a = parse("500m").unwrap();
        let b = parse("0.5").unwrap();
        let two = parse("2").unwrap();
        assert_eq!(a.partial_cmp(&b), Some(Ordering::Equal));
        assert!(two > a);
        assert!(parse("1Gi").unwrap() > parse("1G").unwrap());
        assert_eq!(parse("1.5").unwrap().milli_value(), 1500);
        assert_eq!(parse("1n").unwrap().milli_value(), 1);
        assert!(parse("-1").unwrap().is_negative());
    }

    #[test]
    fn scheduler_units() {
        assert_eq!(cpu_millis("250m"), Some(250));
        assert_eq!(cpu_millis("2"), Some(2000));
        assert_eq!(cpu_millis("0.5"), Some(500));
        assert_eq!(cpu_millis("0.1m"), Some(1), "rounded up");
        assert_eq!(bytes("1Gi"), Some(1 << 30));
        assert_eq!(bytes("512Mi"), Some(512 << 20));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1e3"), Some(1000));
        assert_eq!(bytes("0.5"), Some(1), "rounded up");
        assert_eq!(bytes("128974848"), Some(128_974_848));
        // upstream's scanner reads a missing number as zero
        assert_eq!(bytes("Gi"), Some(0));
        for bad in ["", "x", "1Qi", "-1", "1.2.3Gi"] {
            assert_eq!(bytes(bad), None, "{bad}");
            assert_eq!(cpu_millis(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_memory() {
        assert_eq!(format_bytes(1 << 30), "1Gi");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
        assert_eq!(format_bytes(100), "100");
    }
}
