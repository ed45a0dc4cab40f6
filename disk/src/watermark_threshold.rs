//! [`WatermarkThreshold`]: the exclusive threshold an LSM backend's compaction filter applies,
//! read once per compaction: `W − D` over the engine's published watermark, or a purge threshold
//! while `reclaim_below` runs. Every LSM backend (RocksDB, fjall) drives its filter with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tidemark_engine_api::watermark::reclaim_threshold;

use crate::compaction_policy::ThresholdSupplier;

/// The exclusive reclaim threshold compactions of one engine apply, read once per compaction.
///
/// It reads the *in-memory* watermark the engine publishes after persisting it, so a compaction
/// started after `advance_watermark` returns applies the new value.
#[derive(Debug)]
pub struct WatermarkThreshold {
    watermark: Arc<AtomicU64>,
    retention_distance: u64,
    /// Whether `purge` replaces `W − D` (set only for the duration of a purge).
    purging: AtomicBool,
    purge: AtomicU64,
}

impl WatermarkThreshold {
    /// The threshold `W − D` over the shared in-memory watermark.
    pub fn new(watermark: Arc<AtomicU64>, retention_distance: u64) -> Self {
        WatermarkThreshold {
            watermark,
            retention_distance,
            purging: AtomicBool::new(false),
            purge: AtomicU64::new(0),
        }
    }

    /// The threshold a compaction starting now applies: `min(purge, W)` while a purge is in
    /// force, else `W − D`. Never above `W`.
    pub fn current(&self) -> u64 {
        let watermark = self.watermark.load(Ordering::Acquire);
        if self.purging.load(Ordering::Acquire) {
            // W only rises, so clamping again here is belt and braces, never a loosening.
            self.purge.load(Ordering::Acquire).min(watermark)
        } else {
            reclaim_threshold(watermark, self.retention_distance)
        }
    }

    /// Replaces the threshold with `min(threshold, W)` (ignoring the retention distance) until
    /// the returned guard is dropped, and returns the guard with the threshold it applies.
    ///
    /// Every compaction that *starts* meanwhile applies it, RocksDB's own background compactions
    /// included: they remove only entries below `min(threshold, W)`, all of which the purge
    /// removes anyway (and, when the purge threshold is below `W − D`, they remove less than
    /// usual, which is always safe). Callers serialise purges (the engine's reclaim lock).
    pub fn purge_below(&self, threshold: u64) -> PurgeGuard<'_> {
        let threshold = threshold.min(self.watermark.load(Ordering::Acquire));
        self.purge.store(threshold, Ordering::Release);
        self.purging.store(true, Ordering::Release);
        PurgeGuard {
            owner: self,
            threshold,
        }
    }
}

/// Keeps a purge threshold in force; dropping it restores `W − D` (also on an error path).
#[derive(Debug)]
#[must_use = "the purge threshold is in force only while the guard lives"]
pub struct PurgeGuard<'a> {
    owner: &'a WatermarkThreshold,
    threshold: u64,
}

impl PurgeGuard<'_> {
    /// The threshold in force: `min(requested, W)` when the purge started.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }
}

impl Drop for PurgeGuard<'_> {
    fn drop(&mut self) {
        self.owner.purging.store(false, Ordering::Release);
    }
}

/// The watermark supplier: `threshold.current() − 1`, or `None` (remove nothing) when the
/// threshold is 0. Pair it with distance 0.
pub fn watermark_supplier(threshold: Arc<WatermarkThreshold>) -> ThresholdSupplier {
    Arc::new(move || threshold.current().checked_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_supplier_is_threshold_minus_one() {
        let w = Arc::new(AtomicU64::new(0));
        let s = watermark_supplier(Arc::new(WatermarkThreshold::new(Arc::clone(&w), 0)));
        assert_eq!(s(), None);
        w.store(10, Ordering::Release);
        assert_eq!(s(), Some(9));
        let d = WatermarkThreshold::new(Arc::clone(&w), 3);
        assert_eq!(d.current(), 7);
        let big = WatermarkThreshold::new(Arc::clone(&w), u64::MAX);
        assert_eq!(big.current(), 0);
    }

    #[test]
    fn purge_replaces_the_threshold_while_in_force_and_never_exceeds_w() {
        let w = Arc::new(AtomicU64::new(30));
        let t = WatermarkThreshold::new(Arc::clone(&w), 20);
        assert_eq!(t.current(), 10);
        {
            let purge = t.purge_below(25);
            assert_eq!((purge.threshold(), t.current()), (25, 25));
        }
        assert_eq!(t.current(), 10, "dropping the guard restores W - D");
        {
            // Below W - D: the purge removes less, never more than asked.
            let purge = t.purge_below(4);
            assert_eq!((purge.threshold(), t.current()), (4, 4));
        }
        {
            let purge = t.purge_below(u64::MAX);
            assert_eq!((purge.threshold(), t.current()), (30, 30));
            w.store(50, Ordering::Release);
            assert_eq!(t.current(), 30, "a purge keeps its threshold when W moves");
        }
        assert_eq!(t.current(), 30);
        // A retention distance too large for `tag + D` arithmetic does not stop a purge.
        let big = Arc::new(WatermarkThreshold::new(Arc::clone(&w), u64::MAX));
        let supplier = watermark_supplier(Arc::clone(&big));
        assert_eq!(supplier(), None);
        let purge = big.purge_below(u64::MAX);
        assert_eq!((purge.threshold(), supplier()), (50, Some(49)));
    }
}
