//! A cheap in-memory estimate of covered entries not yet reclaimed.
//!
//! Counting covered entries exactly would need a scan (RocksDB keeps no offset index). Instead the
//! engine remembers, per applied batch, the offset range it wrote and how many records: a *run*.
//! The estimate for a threshold is the sum of runs wholly below it plus a proportional share of
//! the run it cuts (exact when a batch holds one record per offset with no gaps, the WAL's usual
//! shape). Overwritten keys are counted once per version, and entries RocksDB's own background
//! compactions removed are still counted until the next reclaim, so it errs high, like the B-tree
//! backends (which count stale index rows). A finished reclaim forgets everything below its
//! threshold, so right after it the estimate at that threshold is 0. Adjacent old runs are merged beyond [`MAX_RUNS`] so
//! memory stays bounded when reclaim never runs. After a reopen the history is unknown: one run
//! covering `[0, applied end)` seeded with RocksDB's key estimate stands in for it.

use std::collections::VecDeque;

/// Most runs remembered before the oldest two are merged.
pub const MAX_RUNS: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    first: u64,
    last: u64,
    count: u64,
}

impl Run {
    /// Records of this run with offset `< threshold`, assuming an even spread.
    fn below(&self, threshold: u64) -> u64 {
        if threshold > self.last {
            self.count
        } else if threshold <= self.first {
            0
        } else {
            let span = u128::from(self.last - self.first) + 1;
            let part = u128::from(threshold - self.first);
            u64::try_from(u128::from(self.count) * part / span).unwrap_or(self.count)
        }
    }
}

/// Runs of written offsets, oldest first.
#[derive(Debug, Default)]
pub struct CoveredTracker {
    runs: VecDeque<Run>,
}

impl CoveredTracker {
    /// A tracker seeded with `count` entries spread over `[0, applied_end)` (after a reopen).
    pub fn seeded(applied_end: u64, count: u64) -> Self {
        let mut t = CoveredTracker::default();
        if applied_end > 0 && count > 0 {
            t.record(0, applied_end - 1, count);
        }
        t
    }

    /// Remembers `count` records written with offsets in `[first, last]`.
    pub fn record(&mut self, first: u64, last: u64, count: u64) {
        if count == 0 {
            return;
        }
        self.runs.push_back(Run {
            first: first.min(last),
            last: last.max(first),
            count,
        });
        if self.runs.len() > MAX_RUNS
            && let (Some(a), Some(b)) = (self.runs.pop_front(), self.runs.pop_front())
        {
            self.runs.push_front(Run {
                first: a.first.min(b.first),
                last: a.last.max(b.last),
                count: a.count.saturating_add(b.count),
            });
        }
    }

    /// Estimated entries with offset `< threshold` not yet reclaimed.
    pub fn estimate(&self, threshold: u64) -> u64 {
        self.runs
            .iter()
            .fold(0u64, |acc, r| acc.saturating_add(r.below(threshold)))
    }

    /// Forgets what a reclaim at `threshold` removed.
    pub fn reclaimed(&mut self, threshold: u64) {
        self.runs.retain_mut(|r| {
            let gone = r.below(threshold);
            if gone >= r.count {
                return false;
            }
            if gone > 0 {
                r.count -= gone;
                r.first = threshold;
            }
            true
        });
    }

    /// Number of runs held (for tests).
    pub fn runs(&self) -> usize {
        self.runs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_and_forgets() {
        let mut t = CoveredTracker::default();
        t.record(0, 9, 10);
        t.record(10, 19, 10);
        assert_eq!(t.estimate(0), 0);
        assert_eq!(t.estimate(10), 10);
        assert_eq!(t.estimate(15), 15);
        assert_eq!(t.estimate(100), 20);
        t.reclaimed(15);
        assert_eq!(t.estimate(15), 0);
        assert_eq!(t.estimate(100), 5);
        assert_eq!(t.runs(), 1);
    }

    #[test]
    fn stays_bounded() {
        let mut t = CoveredTracker::default();
        for i in 0..(MAX_RUNS as u64 * 3) {
            t.record(i, i, 1);
        }
        assert!(t.runs() <= MAX_RUNS);
        assert_eq!(t.estimate(u64::MAX), MAX_RUNS as u64 * 3);
        let seeded = CoveredTracker::seeded(100, 50);
        assert_eq!(seeded.estimate(100), 50);
        assert_eq!(CoveredTracker::seeded(0, 50).runs(), 0);
    }
}
