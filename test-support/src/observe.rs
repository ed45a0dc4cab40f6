//! Observing the reclaims an engine runs, whoever calls them (a scheduler, usually): an engine
//! wrapper, [`Observed`], records each one into a [`ReclaimLog`] — when it started, how long it
//! took, what it reported — and lets a caller ask whether a reclaim ran at any moment of a
//! stretch of its own (an apply, say).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tidemark_engine_api::{Engine, EngineHandle, ReclaimReport, Result, forward_engine};

/// One reclaim that completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservedReclaim {
    /// When it started.
    pub started: Instant,
    /// Its wall time, as the wrapper measured it.
    pub took: Duration,
    /// What it reported.
    pub report: ReclaimReport,
}

/// The reclaims of one engine (or several), and whether one is running now.
#[derive(Debug, Default)]
pub struct ReclaimLog {
    /// Reclaims running now.
    running: AtomicU64,
    /// Reclaim starts and ends so far: a stretch that saw it change overlapped one.
    events: AtomicU64,
    /// Wall time of every reclaim, failed ones included, in nanoseconds.
    nanos: AtomicU64,
    completed: Mutex<Vec<ObservedReclaim>>,
}

/// What the log looked like at the start of a stretch ([`ReclaimLog::mark`]).
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    running: u64,
    events: u64,
}

impl ReclaimLog {
    /// Taken at the start of a stretch (before an apply, say).
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

    /// Every reclaim that completed, in the order they finished.
    pub fn completed(&self) -> Vec<ObservedReclaim> {
        self.completed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The wall time of every reclaim so far, failed ones included, summed.
    pub fn total_time(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }

    fn begin(&self) -> Instant {
        self.running.fetch_add(1, Ordering::SeqCst);
        self.events.fetch_add(1, Ordering::SeqCst);
        Instant::now()
    }

    fn end(&self, started: Instant, report: &Result<ReclaimReport>) {
        let took = started.elapsed();
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::SeqCst);
        if let Ok(report) = report {
            // Only this push happens under the lock, so a poisoned log is still whole.
            self.completed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(ObservedReclaim {
                    started,
                    took,
                    report: *report,
                });
        }
        self.events.fetch_add(1, Ordering::SeqCst);
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An engine that records every `reclaim` into a [`ReclaimLog`] and forwards everything else.
pub struct Observed {
    inner: EngineHandle,
    log: Arc<ReclaimLog>,
}

impl Observed {
    /// `engine`, its reclaims recorded into `log`, as a handle.
    pub fn wrap(engine: EngineHandle, log: Arc<ReclaimLog>) -> EngineHandle {
        EngineHandle::new(Observed { inner: engine, log })
    }
}

impl Engine for Observed {
    forward_engine!(inner; backend_name reclaim_cost apply lookup advance_watermark adopt_lake_watermark
        watermark applied_end reclaim_below stats flush lookup_inline reclaimable verify wait_for_background_work);

    fn reclaim(&self) -> Result<ReclaimReport> {
        let started = self.log.begin();
        let report = self.inner.reclaim();
        self.log.end(started, &report);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_engine_api::{EngineOptions, MemoryEngine, WriteBatch};

    #[test]
    fn reclaims_are_recorded_timed_and_seen_by_an_overlapping_stretch() {
        let log = Arc::new(ReclaimLog::default());
        let engine = Observed::wrap(
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
        let report = engine.reclaim().unwrap();
        assert!(log.overlapped_since(before), "a reclaim ran since the mark");
        assert!(!log.overlapped_since(log.mark()));

        let completed = log.completed();
        assert_eq!(completed.len(), 1);
        assert_eq!(completed[0].report, report);
        // b@1 is covered; a@0 was replaced by the tombstone at 2, which is not.
        assert_eq!((report.values_removed, report.tombstones_removed), (1, 0));
        assert_eq!(log.total_time(), completed[0].took);
    }
}
