//! Scheduler counters: one set per bucket and one running total, updated together.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Identifies a bucket to the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketId(pub u64);

impl fmt::Display for BucketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bucket-{}", self.0)
    }
}

/// What the scheduler did for one bucket (or, in [`SchedulerStats::total`], for all of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReclaimStats {
    /// Accepted `request` calls.
    pub requests: u64,
    /// Requests folded into an already waiting one.
    pub coalesced: u64,
    /// Reclaims that completed successfully.
    pub runs: u64,
    /// Requests served by skipping the reclaim: it would not pay for itself under the bucket's
    /// [`ReclaimPolicy`](super::ReclaimPolicy).
    pub skipped: u64,
    /// Failed reclaim attempts (each retry that fails counts again).
    pub failed: u64,
    /// Retries started after a failed attempt.
    pub retries: u64,
    /// Runs abandoned after `max_retries` failed retries, or by shutdown during a backoff.
    pub gave_up: u64,
    /// Waiting requests dropped by shutdown or unregistration.
    pub dropped: u64,
    /// Values plus tombstones removed by successful runs.
    pub entries_removed: u64,
    /// Wall time of the most recent successful run (tokio clock).
    pub last_duration: Option<Duration>,
}

/// Per-bucket and total scheduler statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Sum over every bucket ever registered (unregistered buckets included).
    pub total: ReclaimStats,
    /// Currently registered buckets.
    pub buckets: BTreeMap<BucketId, ReclaimStats>,
    /// Requests refused: unknown bucket, or after shutdown.
    pub rejected: u64,
}

const NO_DURATION: u64 = u64::MAX;

/// Lock-free counters behind a [`ReclaimStats`].
#[derive(Debug)]
pub(crate) struct ReclaimCounters {
    requests: AtomicU64,
    coalesced: AtomicU64,
    runs: AtomicU64,
    skipped: AtomicU64,
    failed: AtomicU64,
    retries: AtomicU64,
    gave_up: AtomicU64,
    dropped: AtomicU64,
    entries_removed: AtomicU64,
    last_duration_nanos: AtomicU64,
}

impl Default for ReclaimCounters {
    fn default() -> Self {
        ReclaimCounters {
            requests: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
            runs: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            gave_up: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            entries_removed: AtomicU64::new(0),
            last_duration_nanos: AtomicU64::new(NO_DURATION),
        }
    }
}

impl ReclaimCounters {
    pub(crate) fn snapshot(&self) -> ReclaimStats {
        let last = self.last_duration_nanos.load(Ordering::Relaxed);
        ReclaimStats {
            requests: self.requests.load(Ordering::Relaxed),
            coalesced: self.coalesced.load(Ordering::Relaxed),
            runs: self.runs.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            gave_up: self.gave_up.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            entries_removed: self.entries_removed.load(Ordering::Relaxed),
            last_duration: (last != NO_DURATION).then(|| Duration::from_nanos(last)),
        }
    }
}

/// Which counter an event bumps.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Request,
    Coalesced,
    Skipped,
    Failed,
    Retry,
    GaveUp,
    Dropped,
}

/// Records every event in a bucket's counters and in the scheduler-wide total.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    bucket: Arc<ReclaimCounters>,
    total: Arc<ReclaimCounters>,
}

impl Tally {
    pub(crate) fn new(total: Arc<ReclaimCounters>) -> Self {
        Tally {
            bucket: Arc::default(),
            total,
        }
    }

    pub(crate) fn bucket(&self) -> ReclaimStats {
        self.bucket.snapshot()
    }

    pub(crate) fn count(&self, event: Event) {
        for c in [&self.bucket, &self.total] {
            let counter = match event {
                Event::Request => &c.requests,
                Event::Coalesced => &c.coalesced,
                Event::Skipped => &c.skipped,
                Event::Failed => &c.failed,
                Event::Retry => &c.retries,
                Event::GaveUp => &c.gave_up,
                Event::Dropped => &c.dropped,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn run(&self, removed: u64, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos())
            .unwrap_or(NO_DURATION - 1)
            .min(NO_DURATION - 1);
        for c in [&self.bucket, &self.total] {
            c.entries_removed.fetch_add(removed, Ordering::Relaxed);
            c.last_duration_nanos.store(nanos, Ordering::Relaxed);
            c.runs.fetch_add(1, Ordering::Relaxed);
        }
    }
}
