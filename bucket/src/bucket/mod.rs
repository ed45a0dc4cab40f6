//! The bucket layer: [`HistoricalBucket`] ties one engine to a [`LakeLookuper`] and, optionally,
//! to a [`ReclaimScheduler`].
//!
//! Engine calls (`apply`, the local half of `lookup`, watermark updates) run on tokio's blocking
//! pool via `spawn_blocking`, so every method here is `async` and safe to call from async code.
//! Hosts that want synchronous access to the engine (for example to replay a WAL from a plain
//! thread) use [`HistoricalBucket::engine`] directly; lake progress and lookups must still go
//! through the bucket, because it orders the lookuper refresh before the watermark publish.

mod lake_call;
mod lookup;
mod progress;
mod stats;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::lake::{LakeLookuper, LakeSnapshot};
use crate::scheduler::{BucketId, ReclaimScheduler};
use tidemark_engine_api::ApplyOutcome;
use tidemark_engine_api::Engine;
use tidemark_engine_api::EngineHandle;
use tidemark_engine_api::WriteBatch;
use tidemark_engine_api::sync;

pub use lake_call::LakeTimeouts;
pub use progress::Progress;
pub use stats::BucketStats;

use stats::BucketCounters;

/// The scheduler a bucket asks for reclaims, and its id there.
#[derive(Debug, Clone)]
struct Reclaim {
    scheduler: ReclaimScheduler,
    id: BucketId,
}

/// One bucket: local state in an engine, older state in the lake.
///
/// - [`lookup`](Self::lookup): a local value is the answer, a local tombstone means "deleted"
///   (authoritative, the lake is not asked), and only a local miss goes to the lake.
/// - [`on_lake_progress`](Self::on_lake_progress): one at a time per bucket; refreshes the
///   lookuper, *then* advances the watermark, *then* requests a reclaim.
/// - [`recover`](Self::recover): on open or on becoming leader, before serving.
/// - Every lake call is bounded by the bucket's [`LakeTimeouts`]
///   ([`with_lake_timeouts`](Self::with_lake_timeouts)): a lake that hangs is an
///   [`Error::Lake`] naming the call and the timeout, and a refresh that times out publishes
///   nothing.
///
/// ```
/// use std::sync::Arc;
///
/// use tidemark_engine_api::{Engine, EngineHandle, EngineOptions, MemoryEngine, WriteBatch};
/// use tidemark_bucket::{HistoricalBucket, MemoryLake};
///
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
/// let engine = EngineHandle::new(MemoryEngine::new(EngineOptions::default()));
/// let lake = Arc::new(MemoryLake::new());
/// let bucket = HistoricalBucket::new(engine.clone(), lake.clone());
/// assert_eq!(bucket.recover(lake.latest().unwrap_or_default()).await?, 0);
///
/// // The host writes its WAL (which the tiering service copies to the lake) and applies it.
/// let mut batch = WriteBatch::new();
/// batch.put("old", "o", 0).put("gone", "g", 1).delete("gone", 2).put("new", "n", 3);
/// lake.append_batch(&batch)?;
/// bucket.apply(batch).await?;
///
/// // The lake confirms offsets below 3; the bucket publishes W = 3, then covered entries go.
/// let snapshot = lake.commit(3)?;
/// bucket.on_lake_progress(snapshot).await?;
/// assert_eq!(engine.watermark(), 3);
/// engine.reclaim()?;
///
/// assert_eq!(bucket.lookup(b"old").await?, Some(b"o".to_vec())); // from the lake
/// assert_eq!(bucket.lookup(b"gone").await?, None); // tombstone reclaimed: the lake says deleted
/// assert_eq!(bucket.lookup(b"new").await?, Some(b"n".to_vec())); // still local
/// assert_eq!(bucket.stats().lake_fallbacks, 2);
/// # Ok::<(), tidemark_bucket::Error>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct HistoricalBucket {
    engine: EngineHandle,
    lake: Arc<dyn LakeLookuper>,
    /// Bounds every lake call, so a hanging lake is an error rather than a stall.
    lake_timeouts: LakeTimeouts,
    reclaim: Option<Reclaim>,
    /// Serialises lake progress and recovery of this bucket.
    progress: tokio::sync::Mutex<()>,
    /// The snapshots of lake-progress calls waiting for `progress`, and the one being
    /// processed (see [`on_lake_progress`](Self::on_lake_progress)).
    queue: Mutex<progress::ProgressQueue>,
    /// The snapshot the lookuper serves (as far as this bucket refreshed it). Written under
    /// `progress`, after the refresh succeeded and before the watermark it allows is published;
    /// every critical section copies one value.
    served: Mutex<LakeSnapshot>,
    /// Local entries below this offset are not authoritative: a lagging replica adopted (or is
    /// adopting) a lake end beyond its applied end, so the lake may hold newer versions of them.
    /// Raised before the watermark it guards is published; [`recover`](Self::recover) then
    /// physically removes those entries, so this only covers the window until it has (and a
    /// bucket opened over an engine whose purge was interrupted, see [`new`](Self::new)).
    stale_below: AtomicU64,
    counters: BucketCounters,
}

impl std::fmt::Debug for HistoricalBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoricalBucket")
            .field("backend", &self.engine.backend_name())
            .field("bucket_id", &self.bucket_id())
            .field("lake_end", &self.lake_end())
            .finish_non_exhaustive()
    }
}

impl HistoricalBucket {
    /// A bucket without a scheduler (reclaim by hand or not at all). Call
    /// [`recover`](Self::recover) before serving lookups.
    ///
    /// An engine whose watermark is above its applied end adopted a lake end as a lagging
    /// replica; if the process stopped before recovery purged its older local entries, they may
    /// still be there. Until [`recover`](Self::recover) removes them, lookups do not trust local
    /// entries below that watermark.
    pub fn new(engine: impl Into<EngineHandle>, lake: Arc<dyn LakeLookuper>) -> Self {
        let engine = engine.into();
        let watermark = engine.watermark();
        let stale_below = if watermark > engine.applied_end() {
            watermark
        } else {
            0
        };
        HistoricalBucket {
            engine,
            lake,
            lake_timeouts: LakeTimeouts::default(),
            reclaim: None,
            progress: tokio::sync::Mutex::new(()),
            queue: Mutex::new(progress::ProgressQueue::default()),
            served: Mutex::new(LakeSnapshot::default()),
            stale_below: AtomicU64::new(stale_below),
            counters: BucketCounters::default(),
        }
    }

    /// Registers the engine with `scheduler` under `id`; watermark advances then request
    /// reclaims of it.
    pub fn with_scheduler(mut self, scheduler: &ReclaimScheduler, id: BucketId) -> Result<Self> {
        scheduler.register(id, self.engine.clone())?;
        self.reclaim = Some(Reclaim {
            scheduler: scheduler.clone(),
            id,
        });
        Ok(self)
    }

    /// The engine (for synchronous access; see the module docs).
    pub fn engine(&self) -> &EngineHandle {
        &self.engine
    }

    /// The lake lookuper.
    pub fn lake(&self) -> &Arc<dyn LakeLookuper> {
        &self.lake
    }

    /// The scheduler id, when attached to a scheduler.
    pub fn bucket_id(&self) -> Option<BucketId> {
        self.reclaim.as_ref().map(|r| r.id)
    }

    /// The current watermark `W`.
    pub fn watermark(&self) -> u64 {
        self.engine.watermark()
    }

    /// End offset of the lake snapshot the lookuper serves, as far as this bucket refreshed it.
    pub fn lake_end(&self) -> u64 {
        self.served_snapshot().end_offset
    }

    /// The lake snapshot the lookuper serves, as far as this bucket refreshed it
    /// ([`LakeSnapshot::default`] before the first refresh).
    pub fn served_snapshot(&self) -> LakeSnapshot {
        // A plain getter: reading through poisoning is safe, the value is copied whole.
        *self.served.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The served snapshot, for paths that can refuse.
    fn served(&self) -> Result<LakeSnapshot> {
        Ok(*sync::lock(&self.served, "bucket served snapshot")?)
    }

    /// Records the snapshot the lookuper now serves (under `progress`, after its refresh).
    fn set_served(&self, snapshot: LakeSnapshot) -> Result<()> {
        *sync::lock(&self.served, "bucket served snapshot")? = snapshot;
        Ok(())
    }

    /// Counters since creation.
    pub fn stats(&self) -> BucketStats {
        self.counters.snapshot()
    }

    /// Applies a batch (pass-through to [`Engine::apply`] on a blocking thread).
    pub async fn apply(&self, batch: WriteBatch) -> Result<ApplyOutcome> {
        self.blocking(move |engine| engine.apply(&batch)).await
    }

    /// Stops scheduling reclaims for this bucket (waiting for a running one), flushes the
    /// engine and drops the bucket's references to it.
    ///
    /// Dropping a bucket without `close` also deregisters it from the scheduler, at once, but
    /// neither waits for a running reclaim nor flushes.
    pub async fn close(mut self) -> Result<()> {
        if let Some(reclaim) = self.reclaim.take() {
            reclaim.scheduler.unregister(reclaim.id).await;
        }
        self.blocking(|engine| engine.flush()).await
    }

    /// Runs an engine call on the blocking pool.
    async fn blocking<T, F>(&self, call: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&EngineHandle) -> tidemark_engine_api::Result<T> + Send + 'static,
    {
        let engine = self.engine.clone();
        let result = tokio::task::spawn_blocking(move || call(&engine))
            .await
            .map_err(|e| {
                Error::Internal(format!(
                    "a blocking {} engine call did not complete: {e}",
                    self.engine.backend_name()
                ))
            })?;
        Ok(result?)
    }
}

impl Drop for HistoricalBucket {
    /// Deregisters from the scheduler synchronously (no runtime needed), so the id is free at
    /// once and the worker lets go of the engine when it stops; otherwise a dropped bucket
    /// would keep its engine (and, for sled, its directory) registered until shutdown.
    fn drop(&mut self) {
        if let Some(reclaim) = self.reclaim.take()
            && reclaim.scheduler.forget(reclaim.id)
        {
            tracing::debug!(bucket = %reclaim.id, "bucket dropped without close; deregistered");
        }
    }
}
