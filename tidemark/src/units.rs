//! Numbers for people: byte counts in binary units, durations in the unit that reads best. The
//! `tidemark` tool prints its reports with them (`stats`, `reclaim`, `compare`); a host's own
//! reports can read the same.

use std::time::Duration;

/// `n` bytes in IEC units with one decimal (`"512 B"`, `"1.5 KiB"`, `"3.2 GiB"`).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    // Precision loss past 2^53 bytes is far below the one decimal shown.
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// [`bytes`] with the exact count beside it (`"1.5 KiB (1536 bytes)"`).
pub fn bytes_exact(n: u64) -> String {
    format!("{} ({n} bytes)", bytes(n))
}

/// A duration in µs, ms or s, whichever keeps it readable (`"850 µs"`, `"12.3 ms"`, `"4.20 s"`).
pub fn duration(d: Duration) -> String {
    let micros = d.as_micros();
    if micros < 1_000 {
        format!("{micros} µs")
    } else if micros < 1_000_000 {
        format!("{:.1} ms", d.as_secs_f64() * 1_000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_in_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes_exact(1536), "1.5 KiB (1536 bytes)");
        assert_eq!(bytes(5 << 20), "5.0 MiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        // The largest unit shown is PiB: 16 EiB reads as 16384 PiB.
        assert_eq!(bytes(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn durations_pick_their_unit() {
        assert_eq!(duration(Duration::from_micros(850)), "850 µs");
        assert_eq!(duration(Duration::from_micros(12_300)), "12.3 ms");
        assert_eq!(duration(Duration::from_millis(4_200)), "4.20 s");
    }
}
