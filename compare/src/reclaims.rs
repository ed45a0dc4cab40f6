//! Watching the reclaims the scheduler runs: an engine wrapper logs each one (when it started,
//! how long it took, what it removed and rewrote), and tells the writer whether a reclaim was
//! running while an apply was.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use tidemark::{Engine, EngineHandle, ReclaimReport, Result, forward_engine};

/// One reclaim the scheduler ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
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

/// The reclaims of one run, and whether one is running now.
#[derive(Debug, Default)]
pub struct ReclaimLog {
    /// Reclaims running now.
    running: AtomicU64,
    /// Reclaim starts and ends so far: an apply that saw it change overlapped one.
    events: AtomicU64,
    runs: Mutex<Vec<(Instant, ReclaimRun)>>,
}

/// What the log looked like when an apply started.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    running: u64,
    events: u64,
}

impl ReclaimLog {
    /// Taken before an apply.
    pub fn mark(&self) -> Mark {
        // `events` first: a reclaim starting in between is then seen as a changed count.
        let events = self.events.load(Ordering::SeqCst);
        Mark {
            running: self.running.load(Ordering::SeqCst),
            events,
        }
    }

    /// Whether a reclaim ran at any moment since `mark` was taken.
    pub fn overlapped_since(&self, mark: Mark) -> bool {
        mark.running > 0
            || self.running.load(Ordering::SeqCst) > 0
            || self.events.load(Ordering::SeqCst) != mark.events
    }

    /// Every reclaim logged, in the order they finished, their starts counted from `origin`.
    pub fn runs(&self, origin: Instant) -> Vec<ReclaimRun> {
        let runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        runs.iter()
            .map(|(started, run)| ReclaimRun {
                start: started.saturating_duration_since(origin).as_secs_f64(),
                ..run.clone()
            })
            .collect()
    }

    fn begin(&self) -> Instant {
        self.running.fetch_add(1, Ordering::SeqCst);
        self.events.fetch_add(1, Ordering::SeqCst);
        Instant::now()
    }

    fn end(&self, started: Instant, report: &Result<ReclaimReport>) {
        let duration = started.elapsed();
        if let Ok(report) = report {
            let run = ReclaimRun {
                start: 0.0,
                duration: duration.as_secs_f64(),
                values_removed: report.values_removed,
                tombstones_removed: report.tombstones_removed,
                bytes_before: report.bytes_before,
                bytes_after: report.bytes_after,
                bytes_rewritten: report.bytes_rewritten,
            };
            // Only this push happens under the lock, so a poisoned log is still whole.
            self.runs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((started, run));
        }
        self.events.fetch_add(1, Ordering::SeqCst);
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An engine that logs every `reclaim` into a [`ReclaimLog`] and forwards everything else.
struct Logged {
    inner: EngineHandle,
    log: Arc<ReclaimLog>,
}

impl Engine for Logged {
    forward_engine!(inner; backend_name reclaim_cost apply lookup advance_watermark adopt_lake_watermark
        watermark applied_end reclaim_below stats flush lookup_inline reclaimable verify);

    fn reclaim(&self) -> Result<ReclaimReport> {
        let started = self.log.begin();
        let report = self.inner.reclaim();
        self.log.end(started, &report);
        report
    }
}

/// `engine`, with its reclaims logged into `log`.
pub fn logged(engine: EngineHandle, log: Arc<ReclaimLog>) -> EngineHandle {
    EngineHandle::new(Logged { inner: engine, log })
}

/// Sums over the reclaims of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
            duration_p50: super::latency::Percentiles::of(durations.iter().copied()).map(|p| p.p50),
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
    use tidemark::{EngineOptions, MemoryEngine, WriteBatch};

    #[test]
    fn reclaims_are_logged_and_seen_by_an_overlapping_apply() {
        let origin = Instant::now();
        let log = Arc::new(ReclaimLog::default());
        let engine = logged(
            EngineHandle::new(MemoryEngine::new(EngineOptions::default())),
            Arc::clone(&log),
        );
        let mut batch = WriteBatch::new();
        batch.put("a", "1", 0).put("b", "2", 1).delete("a", 2);
        engine.apply(&batch).unwrap();
        engine.advance_watermark(2).unwrap();

        let quiet = log.mark();
        assert!(!log.overlapped_since(quiet));
        let before = log.mark();
        engine.reclaim().unwrap();
        assert!(log.overlapped_since(before), "a reclaim ran since the mark");
        assert!(!log.overlapped_since(log.mark()));

        let runs = log.runs(origin);
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
