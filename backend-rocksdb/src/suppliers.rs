//! Suppliers for the [tag-threshold filter](crate::TagThresholdFilter): what the tag means is
//! decided here.
//!
//! - **Watermark**: tag = WAL offset, supplier = `threshold − 1` with distance 0, where the
//!   threshold is [`WatermarkThreshold::current`]: normally `W − D`
//!   ([`tidemark_engine_api::watermark::reclaim_threshold`], saturating), so the filter removes
//!   `offset < W − D` and `W ≤ D` removes nothing. While a recovery purge runs
//!   ([`WatermarkThreshold::purge_below`]) it is the purge threshold instead, never above `W`.
//!   The retention distance is applied in the supplier rather than as the filter's distance so
//!   that a purge threshold, which ignores `D`, can be expressed without `tag + D` overflowing.
//! - **Wall-clock TTL**: tag = write time in milliseconds since the Unix epoch, supplier = now in
//!   milliseconds, distance = TTL in milliseconds, so an entry is removed once it is at least
//!   TTL old. It shares no code path with the watermark except the filter, which is the point:
//!   the filter is a general threshold, not a watermark special case.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::compaction_filter::TagThresholdFilterFactory;
use tidemark_disk::compaction_policy::ThresholdSupplier;
pub use tidemark_disk::watermark_threshold::{PurgeGuard, WatermarkThreshold, watermark_supplier};

/// A factory removing entries with `offset < threshold.current()`.
pub fn watermark_threshold_filter_factory(
    threshold: Arc<WatermarkThreshold>,
) -> TagThresholdFilterFactory {
    TagThresholdFilterFactory::new(0, watermark_supplier(threshold))
}

/// A factory removing entries with `offset < W − retention_distance`.
pub fn watermark_filter_factory(
    watermark: Arc<AtomicU64>,
    retention_distance: u64,
) -> TagThresholdFilterFactory {
    watermark_threshold_filter_factory(Arc::new(WatermarkThreshold::new(
        watermark,
        retention_distance,
    )))
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
    fn clock_is_sane() {
        // 2020-01-01 in ms: any real clock is past it.
        assert!(now_ms() > 1_577_836_800_000);
        assert!(wall_clock_ms_supplier()().is_some());
    }
}
