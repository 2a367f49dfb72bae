//! Resource quantities (`250m`, `2`, `1Gi`, `512M`, `1e3`) as the scheduler
//! compares them: CPU in millicores, everything else in whole units.

/// Parses a quantity into thousandths of a unit (millicores for CPU,
/// milli-bytes for memory); `None` when it is not a quantity.
pub fn parse_milli(s: &str) -> Option<i128> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let (mantissa, scale): (&str, i128) = match suffix {
        "" => (num, 1000),
        "m" => (num, 1),
        "k" => (num, 1000 * 1000),
        "M" => (num, 1000 * 1_000_000),
        "G" => (num, 1000 * 1_000_000_000),
        "T" => (num, 1000 * 1_000_000_000_000),
        "P" => (num, 1000 * 1_000_000_000_000_000),
        "E" => (num, 1000 * 1_000_000_000_000_000_000),
        "Ki" => (num, 1000 << 10),
        "Mi" => (num, 1000 << 20),
        "Gi" => (num, 1000 << 30),
        "Ti" => (num, 1000 << 40),
        "Pi" => (num, 1000 << 50),
        "Ei" => (num, 1000 << 60),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().ok()?;
            if !(-3..=18).contains(&exp) {
                return None;
            }
            let v: f64 = num.parse().ok()?;
            return Some((v * 10f64.powi(exp) * 1000.0).round() as i128);
        }
        _ => return None,
    };
    if mantissa.is_empty() || mantissa == "." {
        return None;
    }
    let v: f64 = mantissa.parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    Some((v * scale as f64).round() as i128)
}

/// A CPU quantity in millicores (rounded up, as the API server does).
pub fn cpu_millis(s: &str) -> Option<i64> {
    parse_milli(s).map(|m| m as i64)
}

/// A byte quantity in bytes (rounded up).
pub fn bytes(s: &str) -> Option<i64> {
    parse_milli(s).map(|m| ((m + 999) / 1000) as i64)
}

/// Formats bytes the way kubectl shows memory (`1Gi`, `512Mi`, `1500Ki`).
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

    #[test]
    fn parses_the_usual_forms() {
        assert_eq!(cpu_millis("250m"), Some(250));
        assert_eq!(cpu_millis("2"), Some(2000));
        assert_eq!(cpu_millis("0.5"), Some(500));
        assert_eq!(bytes("1Gi"), Some(1 << 30));
        assert_eq!(bytes("512Mi"), Some(512 << 20));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1e3"), Some(1000));
        assert_eq!(bytes("128974848"), Some(128_974_848));
        for bad in ["", "x", "1Qi", "-1", "1.2.3Gi", "Gi"] {
            assert_eq!(parse_milli(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_memory() {
        assert_eq!(format_bytes(1 << 30), "1Gi");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
        assert_eq!(format_bytes(100), "100");
    }
}
