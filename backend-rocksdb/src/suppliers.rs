//! Suppliers for the [tag-threshold filter](crate::filter): what the tag means is decided here.
//!
//! - **Watermark**: tag = WAL offset, supplier = `W − 1`, distance = retention distance `D`, so
//!   the filter removes `offset + D <= W − 1`, i.e. `offset < W − D`. `W = 0` removes nothing.
//! - **Wall-clock TTL**: tag = write time in milliseconds since the Unix epoch, supplier = now in
//!   milliseconds, distance = TTL in milliseconds, so an entry is removed once it is at least
//!   TTL old. It shares no code path with the watermark except the filter, which is the point:
//!   the filter is a general threshold, not a watermark special case.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::filter::{TagThresholdFilterFactory, ThresholdSupplier};

/// The watermark supplier: reads the in-memory `W` (exclusive) and returns `W − 1`, or `None`
/// when `W = 0`.
///
/// It must read the *in-memory* watermark the engine publishes after persisting it, so that a
/// compaction started after `advance_watermark` returns applies the new value.
pub fn watermark_supplier(watermark: Arc<AtomicU64>) -> ThresholdSupplier {
    Arc::new(move || watermark.load(Ordering::Acquire).checked_sub(1))
}

/// A factory removing entries with `offset < W − retention_distance`.
pub fn watermark_filter_factory(
    watermark: Arc<AtomicU64>,
    retention_distance: u64,
) -> TagThresholdFilterFactory {
    TagThresholdFilterFactory::new(retention_distance, watermark_supplier(watermark))
}

/// Milliseconds since the Unix epoch (0 if the clock is before it), the tag a TTL store writes.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The wall-clock supplier: the current time in milliseconds since the Unix epoch.
pub fn wall_clock_ms_supplier() -> ThresholdSupplier {
    Arc::new(|| Some(now_ms()))
}

/// A factory removing entries whose write time (the tag, in ms) is at least `ttl` ago.
pub fn ttl_filter_factory(ttl: Duration) -> TagThresholdFilterFactory {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    TagThresholdFilterFactory::new(ttl_ms, wall_clock_ms_supplier())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_supplier_is_w_minus_one() {
        let w = Arc::new(AtomicU64::new(0));
        let s = watermark_supplier(Arc::clone(&w));
        assert_eq!(s(), None);
        w.store(10, Ordering::Release);
        assert_eq!(s(), Some(9));
    }

    #[test]
    fn clock_is_sane() {
        // 2020-01-01 in ms: any real clock is past it.
        assert!(now_ms() > 1_577_836_800_000);
        assert!(wall_clock_ms_supplier()().is_some());
    }
}
