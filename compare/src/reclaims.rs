//! The reclaims the scheduler ran, as a run reports them: each one (when it started, how long it
//! took, what it removed and rewrote), from the [`ReclaimLog`] an observing engine wrapper kept,
//! and their totals.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tidemark_test_support::observe::ReclaimLog;

/// One reclaim the scheduler ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReclaimRun {
    /// When it started, seconds since the run started.
    pub start: f64,
    /// Its wall time, seconds.
    pub duration: f64,
    /// Values removed.
    pub values_removed: u64,
    /// Tombstones removed.
    pub tombstones_removed: u64,
    /// Bytes on disk before and after, as the backend measures them.
    pub bytes_before: u64,
    /// See `bytes_before`.
    pub bytes_after: u64,
    /// Bytes of table files the reclaim wrote (RocksDB; `None` where the backend does not know).
    pub bytes_rewritten: Option<u64>,
}

/// Every reclaim `log` recorded, in the order they finished, their starts counted from `origin`.
pub fn runs(log: &ReclaimLog, origin: Instant) -> Vec<ReclaimRun> {
    log.completed()
        .into_iter()
        .map(|r| ReclaimRun {
            start: r.started.saturating_duration_since(origin).as_secs_f64(),
            duration: r.took.as_secs_f64(),
            values_removed: r.report.values_removed,
            tombstones_removed: r.report.tombstones_removed,
            bytes_before: r.report.bytes_before,
            bytes_after: r.report.bytes_after,
            bytes_rewritten: r.report.bytes_rewritten,
        })
        .collect()
}

/// Sums over the reclaims of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReclaimTotals {
    /// Reclaims that completed.
    pub runs: u64,
    /// Values removed by them.
    pub values_removed: u64,
    /// Tombstones removed by them.
    pub tombstones_removed: u64,
    /// Their wall time, seconds: the median, the longest and the sum.
    pub duration_p50: Option<f64>,
    /// See `duration_p50`.
    pub duration_max: Option<f64>,
    /// See `duration_p50`.
    pub duration_total: f64,
    /// Bytes on disk the reclaims freed (before − after, each run; a run that grew the store
    /// counts 0).
    pub bytes_freed: u64,
    /// Bytes the reclaims rewrote, where the backend measures it (RocksDB's table files).
    pub bytes_rewritten: Option<u64>,
    /// `bytes_rewritten ÷ bytes_freed`, where both are known and something was freed.
    pub rewritten_per_freed: Option<f64>,
}

impl ReclaimTotals {
    /// The totals of `runs`.
    pub fn of(runs: &[ReclaimRun]) -> Self {
        let mut durations: Vec<Duration> = runs
            .iter()
            .map(|r| Duration::from_secs_f64(r.duration))
            .collect();
        durations.sort_unstable();
        let bytes_freed = runs
            .iter()
            .map(|r| r.bytes_before.saturating_sub(r.bytes_after))
            .sum::<u64>();
        let bytes_rewritten = runs
            .iter()
            .filter_map(|r| r.bytes_rewritten)
            .reduce(u64::saturating_add);
        ReclaimTotals {
            runs: runs.len() as u64,
            values_removed: runs.iter().map(|r| r.values_removed).sum(),
            tombstones_removed: runs.iter().map(|r| r.tombstones_removed).sum(),
            duration_p50: super::percentiles::Percentiles::of(durations.iter().copied())
                .map(|p| p.p50),
            duration_max: durations.last().map(Duration::as_secs_f64),
            duration_total: durations.iter().map(Duration::as_secs_f64).sum(),
            bytes_freed,
            bytes_rewritten,
            rewritten_per_freed: bytes_rewritten
                .filter(|_| bytes_freed > 0)
                .map(|w| w as f64 / bytes_freed as f64),
        }
    }

    /// Values plus tombstones removed.
    pub fn entries(&self) -> u64 {
        self.values_removed + self.tombstones_removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tidemark::{Engine, EngineHandle, EngineOptions, MemoryEngine, WriteBatch};
    use tidemark_test_support::observe::Observed;

    #[test]
    fn logged_reclaims_become_runs() {
        let origin = Instant::now();
        let log = Arc::new(ReclaimLog::default());
        let engine = Observed::wrap(
            EngineHandle::new(MemoryEngine::new(EngineOptions::default())),
            Arc::clone(&log),
        );
        let mut batch = WriteBatch::new();
        batch.put("a", "1", 0).put("b", "2", 1).delete("a", 2);
        engine.apply(&batch).unwrap();
        engine.advance_watermark(2).unwrap();

        // What the log sees of overlaps is test-support's `observe` test; here, the runs.
        engine.reclaim().unwrap();

        let runs = runs(&log, origin);
        assert_eq!(runs.len(), 1);
        // b@1 is covered; a@0 was replaced by the tombstone at 2, which is not.
        assert_eq!((runs[0].values_removed, runs[0].tombstones_removed), (1, 0));
        let totals = ReclaimTotals::of(&runs);
        assert_eq!((totals.runs, totals.entries()), (1, 1));
        assert_eq!(totals.bytes_rewritten, None);
        assert_eq!(totals.rewritten_per_freed, None);
    }

    #[test]
    fn totals_sum_what_the_backends_report() {
        let run = |duration, before, after, rewritten| ReclaimRun {
            start: 0.0,
            duration,
            values_removed: 3,
            tombstones_removed: 1,
            bytes_before: before,
            bytes_after: after,
            bytes_rewritten: rewritten,
        };
        let totals = ReclaimTotals::of(&[
            run(0.5, 1_000, 400, Some(300)),
            run(0.1, 500, 600, Some(100)),
            run(0.3, 800, 600, Some(0)),
        ]);
        assert_eq!(totals.runs, 3);
        assert_eq!(totals.entries(), 12);
        assert_eq!(totals.bytes_freed, 800, "a run that grew the store frees 0");
        assert_eq!(totals.bytes_rewritten, Some(400));
        assert_eq!(totals.rewritten_per_freed, Some(0.5));
        assert_eq!(totals.duration_p50, Some(0.3));
        assert_eq!(totals.duration_max, Some(0.5));
        assert!((totals.duration_total - 0.9).abs() < 1e-9);
        assert_eq!(ReclaimTotals::of(&[]).duration_max, None);
    }
}
