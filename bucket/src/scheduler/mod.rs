//! The reclaim scheduler: turns "the watermark moved" into coalesced, rate-limited reclaims.
//!
//! Each registered bucket gets one worker task. [`ReclaimScheduler::request`] only flips the
//! bucket's "waiting" flag and wakes the worker, so it never blocks; the worker serialises the
//! bucket's reclaims (at most one running and one waiting), spaces their starts by
//! `min_interval`, skips buckets whose reclaim would not pay for itself (the backend kind's
//! [`ReclaimPolicy`], read from the O(1) `Engine::reclaimable` before taking a permit), shares
//! `max_concurrent` permits with every other bucket, runs `Engine::reclaim` on a blocking thread
//! and retries failures with exponential backoff.

mod config;
mod policy;
mod slot;
mod stats;
mod worker;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::runtime::Handle;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use tidemark_engine_api::EngineHandle;

pub use config::SchedulerConfig;
pub use policy::ReclaimPolicy;
pub use slot::Requested;
pub use stats::{BucketId, ReclaimStats, SchedulerStats};

use slot::Slot;
use stats::{ReclaimCounters, Tally};
use worker::{AliveGuard, Worker};

/// A registered bucket's worker and the switch that stops it.
struct Registration {
    slot: Arc<Slot>,
    stop: watch::Sender<bool>,
    worker: JoinHandle<()>,
}

struct Inner {
    config: Arc<SchedulerConfig>,
    handle: Handle,
    permits: Arc<Semaphore>,
    registry: RwLock<HashMap<BucketId, Registration>>,
    closed: AtomicBool,
    /// Number of worker tasks still running, so every `shutdown` caller can wait for all.
    alive: Arc<watch::Sender<usize>>,
    total: Arc<ReclaimCounters>,
    rejected: AtomicU64,
}

/// Schedules reclaims for many buckets. Cheap to clone (all clones share one scheduler).
///
/// Dropping every clone without [`ReclaimScheduler::shutdown`] stops the workers too, but does
/// not wait for running reclaims.
#[derive(Clone)]
pub struct ReclaimScheduler {
    inner: Arc<Inner>,
}

impl fmt::Debug for ReclaimScheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReclaimScheduler")
            .field("config", &self.inner.config)
            .field("buckets", &self.read().len())
            .field("closed", &self.inner.closed.load(Ordering::SeqCst))
            .finish()
    }
}

impl ReclaimScheduler {
    /// A scheduler whose workers run on the current tokio runtime. Fails outside a runtime.
    pub fn new(config: SchedulerConfig) -> Result<Self> {
        let handle = Handle::try_current().map_err(|e| {
            Error::Unsupported(format!("ReclaimScheduler::new needs a tokio runtime: {e}"))
        })?;
        Ok(Self::with_handle(config, handle))
    }

    /// A scheduler whose workers run on `handle`'s runtime.
    pub fn with_handle(config: SchedulerConfig, handle: Handle) -> Self {
        let permits = Arc::new(Semaphore::new(config.permits()));
        ReclaimScheduler {
            inner: Arc::new(Inner {
                config: Arc::new(config),
                handle,
                permits,
                registry: RwLock::default(),
                closed: AtomicBool::new(false),
                alive: Arc::new(watch::Sender::new(0)),
                total: Arc::default(),
                rejected: AtomicU64::new(0),
            }),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &SchedulerConfig {
        &self.inner.config
    }

    /// Starts scheduling reclaims of `engine` under `id`. Fails when the id is taken or after
    /// shutdown.
    pub fn register(&self, id: BucketId, engine: impl Into<EngineHandle>) -> Result<()> {
        let engine = engine.into();
        let mut registry = self.write();
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        if registry.contains_key(&id) {
            return Err(Error::invalid(format!(
                "{id} is already registered with the reclaim scheduler"
            )));
        }
        let slot = Arc::new(Slot::new(
            id,
            engine,
            Tally::new(Arc::clone(&self.inner.total)),
        ));
        let (stop, stop_rx) = watch::channel(false);
        self.inner.alive.send_modify(|n| *n += 1);
        let worker = Worker {
            slot: Arc::clone(&slot),
            config: Arc::clone(&self.inner.config),
            permits: Arc::clone(&self.inner.permits),
            stop: stop_rx,
            alive: AliveGuard(Arc::clone(&self.inner.alive)),
        };
        let worker = self.inner.handle.spawn(worker.run());
        registry.insert(id, Registration { slot, stop, worker });
        tracing::debug!(bucket = %id, "bucket registered for reclaim");
        Ok(())
    }

    /// Asks for a reclaim of bucket `id`. Never blocks: the request becomes the bucket's waiting
    /// reclaim or coalesces into the one already waiting. `Error::Closed` after shutdown;
    /// `Error::InvalidInput` for an unknown bucket.
    pub fn request(&self, id: BucketId) -> Result<Requested> {
        if self.inner.closed.load(Ordering::SeqCst) {
            self.inner.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(Error::Closed);
        }
        let slot = self.read().get(&id).map(|r| Arc::clone(&r.slot));
        match slot {
            Some(slot) => Ok(slot.request()),
            None => {
                self.inner.rejected.fetch_add(1, Ordering::Relaxed);
                let closed = self.inner.closed.load(Ordering::SeqCst);
                Err(if closed {
                    Error::Closed
                } else {
                    Error::invalid(format!("{id} is not registered with the reclaim scheduler"))
                })
            }
        }
    }

    /// Waits until bucket `id` has no reclaim running or waiting: every request made before the
    /// call has been served (run, skipped by the policy, given up after retries, or
    /// dropped by a stop). A request made meanwhile extends the wait. Returns at once for an
    /// unknown bucket. Useful before a final measurement or a graceful handover.
    pub async fn settled(&self, id: BucketId) {
        let slot = self.read().get(&id).map(|r| Arc::clone(&r.slot));
        if let Some(slot) = slot {
            slot.idle().await;
        }
    }

    /// Stops scheduling bucket `id`: waits for its running reclaim (a waiting one is dropped)
    /// and releases the scheduler's reference to its engine. Returns whether it was registered.
    pub async fn unregister(&self, id: BucketId) -> bool {
        let Some(registration) = self.write().remove(&id) else {
            return false;
        };
        registration.stop.send_replace(true);
        if let Err(e) = registration.worker.await {
            tracing::warn!(bucket = %id, error = %e, "reclaim worker ended abnormally");
        }
        tracing::debug!(bucket = %id, "bucket unregistered from reclaim");
        true
    }

    /// Stops scheduling bucket `id` without waiting: the id is free for a new registration as
    /// soon as this returns, and the worker ends on its own (after its running reclaim, if any;
    /// a waiting one is dropped), releasing its reference to the engine then. Needs no runtime
    /// context, so it can run in `Drop`. Returns whether it was registered.
    ///
    /// [`unregister`](Self::unregister) is the graceful form: it also waits for the worker.
    pub fn forget(&self, id: BucketId) -> bool {
        let Some(registration) = self.write().remove(&id) else {
            return false;
        };
        registration.stop.send_replace(true);
        // Dropping the handle detaches the worker; `shutdown` still waits for it (`alive`).
        drop(registration);
        tracing::debug!(bucket = %id, "bucket forgotten by reclaim");
        true
    }

    /// Refuses new registrations and requests (`Error::Closed`), drops waiting reclaims, and
    /// waits until every running reclaim has finished. Idempotent; concurrent callers all wait.
    pub async fn shutdown(&self) {
        let drained: Vec<Registration> = {
            let mut registry = self.write();
            self.inner.closed.store(true, Ordering::SeqCst);
            registry.drain().map(|(_, r)| r).collect()
        };
        for registration in &drained {
            registration.stop.send_replace(true);
        }
        drop(drained);
        let mut alive = self.inner.alive.subscribe();
        // The sender lives in `inner`, which `self` keeps alive, so this cannot fail.
        let _ = alive.wait_for(|n| *n == 0).await;
        tracing::info!("reclaim scheduler shut down");
    }

    /// Whether [`ReclaimScheduler::shutdown`] has been called.
    pub fn is_shut_down(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }

    /// Per-bucket and total statistics.
    pub fn stats(&self) -> SchedulerStats {
        let buckets = self
            .read()
            .iter()
            .map(|(id, r)| (*id, r.slot.tally.bucket()))
            .collect();
        SchedulerStats {
            total: self.inner.total.snapshot(),
            buckets,
            rejected: self.inner.rejected.load(Ordering::Relaxed),
        }
    }

    /// Statistics of one registered bucket.
    pub fn bucket_stats(&self, id: BucketId) -> Option<ReclaimStats> {
        self.read().get(&id).map(|r| r.slot.tally.bucket())
    }

    // Nothing panics while the registry lock is held, so a poisoned map is still consistent.
    fn read(&self) -> RwLockReadGuard<'_, HashMap<BucketId, Registration>> {
        self.inner
            .registry
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<BucketId, Registration>> {
        self.inner
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
