//! When a reclaim pays for itself: the scheduler's skip rule, per reclaim cost model.
//!
//! A sweeper (sled, redb) visits only the covered index rows, so a reclaim costs about what it
//! reclaims and is worth running as soon as anything is covered. An LSM compaction (RocksDB)
//! rewrites the live data of the bucket it compacts, so it runs only once the covered bytes reach
//! a share of the bucket (the *garbage ratio*, like TiKV's GC ratio threshold): at ratio `r` a
//! reclaim rewrites at most `(1 − r) / r` bytes per byte it removes (1 at the default 0.5, so at
//! most 2 bytes written and read per byte reclaimed). A direct `Engine::reclaim` ignores the
//! policy: the contract holds whoever calls it.

use tidemark_engine_api::Reclaimable;

/// The skip rule for one reclaim cost model ([`tidemark_engine_api::ReclaimCost`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReclaimPolicy {
    /// Fewer covered entries than this: skip. 0 with a ratio of 0 never skips (and never reads
    /// the estimate).
    pub min_entries: u64,
    /// Covered bytes ÷ stored bytes below this: skip (0 disables the check).
    pub min_garbage_ratio: f64,
}

/// Why a request was skipped, for the scheduler's log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Verdict {
    Run,
    TooFewEntries,
    BelowRatio(f64),
}

impl ReclaimPolicy {
    /// Sweeping backends: reclaim as soon as one entry is covered.
    pub const SWEEP: ReclaimPolicy = ReclaimPolicy {
        min_entries: 1,
        min_garbage_ratio: 0.0,
    };

    /// Every request reclaims; the estimate is not read.
    pub const ALWAYS: ReclaimPolicy = ReclaimPolicy {
        min_entries: 0,
        min_garbage_ratio: 0.0,
    };

    /// Compacting backends: reclaim once half the bucket's bytes are covered.
    pub const COMPACTION: ReclaimPolicy = ReclaimPolicy {
        min_entries: 1,
        min_garbage_ratio: 0.5,
    };

    /// Whether the policy never skips (so the estimate need not be read).
    pub fn never_skips(&self) -> bool {
        self.min_entries == 0 && self.min_garbage_ratio <= 0.0
    }

    pub(crate) fn verdict(&self, reclaimable: &Reclaimable) -> Verdict {
        if reclaimable.covered.entries < self.min_entries {
            return Verdict::TooFewEntries;
        }
        let ratio = reclaimable.garbage_ratio();
        if self.min_garbage_ratio > 0.0 && ratio < self.min_garbage_ratio {
            return Verdict::BelowRatio(ratio);
        }
        Verdict::Run
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_engine_api::Covered;

    fn estimate(entries: u64, bytes: u64, stored: u64) -> Reclaimable {
        Reclaimable {
            threshold: 10,
            covered: Covered { entries, bytes },
            stored: Covered {
                entries: entries * 2,
                bytes: stored,
            },
        }
    }

    #[test]
    fn sweep_runs_on_any_covered_entry() {
        assert_eq!(
            ReclaimPolicy::SWEEP.verdict(&estimate(0, 0, 100)),
            Verdict::TooFewEntries
        );
        assert_eq!(
            ReclaimPolicy::SWEEP.verdict(&estimate(1, 1, 1_000)),
            Verdict::Run
        );
    }

    #[test]
    fn compaction_waits_for_the_garbage_ratio() {
        let p = ReclaimPolicy::COMPACTION;
        assert_eq!(
            p.verdict(&estimate(10, 499, 1_000)),
            Verdict::BelowRatio(0.499)
        );
        assert_eq!(p.verdict(&estimate(10, 500, 1_000)), Verdict::Run);
        assert_eq!(p.verdict(&estimate(0, 0, 0)), Verdict::TooFewEntries);
        assert!(!p.never_skips());
        let off = ReclaimPolicy {
            min_entries: 0,
            min_garbage_ratio: 0.0,
        };
        assert!(off.never_skips());
        assert_eq!(off.verdict(&estimate(0, 0, 0)), Verdict::Run);
    }
}
