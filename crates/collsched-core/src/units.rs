//! Parsing of human units at the edges: sizes (`64MiB`, `1GB`, `4096`) and
//! bandwidths (`400Gbps`, `450GB/s`). Inside, everything is bytes and bytes/s.
//! GB = 1e9 bytes in bandwidth figures, as nccl-tests.
use crate::error::Result;
use crate::invalid;

fn split_number(s: &str) -> Result<(u128, u128, &str)> {
    // Returns (numerator, denominator, unit) so "1.5GB" is exact: 15/10 * 1e9.
    let s = s.trim();
    if s.starts_with('-') {
        return invalid!("'{s}' is negative; sizes, bandwidths and latencies must be non-negative");
    }
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    if num.is_empty() {
        return invalid!("'{s}' does not start with a number");
    }
    let (int, frac) = match num.split_once('.') {
        Some((a, b)) => (a, b),
        None => (num.as_str(), ""),
    };
    if frac.contains('.') || frac.len() > 18 || int.len() > 24 {
        return invalid!("'{s}' is not a valid number");
    }
    let den = 10u128.pow(frac.len() as u32);
    let int_v: u128 = if int.is_empty() { 0 } else { int.parse().map_err(|_| crate::error::Error::InvalidInput(format!("'{s}' is not a valid number")))? };
    let frac_v: u128 = if frac.is_empty() { 0 } else { frac.parse().map_err(|_| crate::error::Error::InvalidInput(format!("'{s}' is not a valid number")))? };
    Ok((int_v * den + frac_v, den, unit.trim()))
}

fn scaled(s: &str, num: u128, den: u128, mult: u128) -> Result<u64> {
    let v = num.checked_mul(mult).map(|x| x / den);
    match v {
        Some(v) if v <= u64::MAX as u128 => Ok(v as u64),
        _ => invalid!("'{s}' is too large"),
    }
}

/// Parse a byte size: plain bytes or B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64> {
    let (num, den, unit) = split_number(s)?;
    let mult: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return invalid!("unknown size unit in '{s}' (use B, KB, MB, GB, KiB, MiB, GiB)"),
    };
    scaled(s, num, den, mult)
}

/// Parse a bandwidth into bytes/s: `GB/s`, `MB/s`, `Gbps`, `Mbps`, `Tbps`, or plain bytes/s.
pub fn parse_bandwidth(s: &str) -> Result<u64> {
    let (num, den, unit) = split_number(s)?;
    let (mult, bits): (u128, bool) = match unit.to_ascii_lowercase().as_str() {
        "" | "b/s" | "bps_bytes" => (1, false),
        "kb/s" => (1_000, false),
        "mb/s" => (1_000_000, false),
        "gb/s" => (1_000_000_000, false),
        "tb/s" => (1_000_000_000_000, false),
        "kbps" | "kbit/s" => (1_000, true),
        "mbps" | "mbit/s" => (1_000_000, true),
        "gbps" | "gbit/s" => (1_000_000_000, true),
        "tbps" | "tbit/s" => (1_000_000_000_000, true),
        _ => return invalid!("unknown bandwidth unit in '{s}' (use GB/s, MB/s, Gbps, Mbps)"),
    };
    let v = scaled(s, num, if bits { den * 8 } else { den }, mult)?;
    if v == 0 {
        return invalid!("bandwidth '{s}' must be positive");
    }
    Ok(v)
}

/// Parse a duration into nanoseconds: `ns`, `us`, `ms`, `s` (plain numbers are microseconds).
pub fn parse_duration_ns(s: &str) -> Result<u64> {
    let (num, den, unit) = split_number(s)?;
    let mult: u128 = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1,
        "" | "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return invalid!("unknown time unit in '{s}' (use ns, us, ms, s)"),
    };
    scaled(s, num, den, mult)
}

/// Human-readable bytes with binary prefixes, for messages and tables.
pub fn format_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 { format!("{b}B") } else { format!("{v:.2}{}", U[i]) }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert!(parse_bytes("12parsecs").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999999999999TiB").is_err());
    }
    #[test]
    fn bandwidths() {
        assert_eq!(parse_bandwidth("400Gbps").unwrap(), 50_000_000_000);
        assert_eq!(parse_bandwidth("450GB/s").unwrap(), 450_000_000_000);
        assert_eq!(parse_bandwidth("12.5 GB/s").unwrap(), 12_500_000_000);
        assert!(parse_bandwidth("0Gbps").is_err());
        assert!(parse_bandwidth("3 furlongs").is_err());
        assert!(parse_bandwidth("-5Gbps").unwrap_err().to_string().contains("negative"));
    }
    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("5us").unwrap(), 5_000);
        assert_eq!(parse_duration_ns("2.5").unwrap(), 2_500);
        assert_eq!(parse_duration_ns("1ms").unwrap(), 1_000_000);
    }
}
