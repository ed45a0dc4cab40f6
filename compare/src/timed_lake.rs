//! The lake lookuper of a run, timed: every `lookup` and `lookup_many` call the bucket makes to
//! the lake (each a local miss) goes into a histogram, so the report shows what a lake lookup
//! costs on the lake the run used.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tidemark::{BucketResult, LakeLookuper, LakeSnapshot, async_trait};

use crate::histogram::Histogram;

/// A lookuper that times every lookup call of the lookuper it wraps.
pub struct TimedLake {
    inner: Arc<dyn LakeLookuper>,
    calls: Mutex<Histogram>,
    keys: AtomicU64,
}

impl TimedLake {
    /// Times the lookups of `inner`.
    pub fn new(inner: Arc<dyn LakeLookuper>) -> Self {
        TimedLake {
            inner,
            calls: Mutex::new(Histogram::default()),
            keys: AtomicU64::new(0),
        }
    }

    /// The duration of every lookup call so far (a `lookup_many` counts once).
    pub fn calls(&self) -> Histogram {
        // Only a record happens under the lock: a poisoned histogram is still whole.
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Keys looked up so far.
    pub fn keys(&self) -> u64 {
        self.keys.load(Ordering::Relaxed)
    }

    fn record(&self, began: Instant, keys: usize) {
        let took = began.elapsed();
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(took);
        self.keys
            .fetch_add(u64::try_from(keys).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

#[async_trait]
impl LakeLookuper for TimedLake {
    async fn refresh(&self, snapshot: LakeSnapshot) -> BucketResult<()> {
        self.inner.refresh(snapshot).await
    }

    async fn lookup(&self, key: &[u8]) -> BucketResult<Option<Vec<u8>>> {
        let began = Instant::now();
        let answer = self.inner.lookup(key).await;
        self.record(began, 1);
        answer
    }

    async fn lookup_many(&self, keys: &[Vec<u8>]) -> BucketResult<Vec<Option<Vec<u8>>>> {
        let began = Instant::now();
        let answers = self.inner.lookup_many(keys).await;
        self.record(began, keys.len());
        answers
    }
}
