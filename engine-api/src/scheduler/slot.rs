//! Per-bucket scheduler state: the engine, the single "waiting" flag that coalesces requests,
//! and the wake-up the bucket's worker sleeps on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use super::BucketId;
use super::stats::{Event, Tally};
use crate::engine::Engine;

/// What became of a [`super::ReclaimScheduler::request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requested {
    /// The request is now the bucket's waiting reclaim.
    Queued,
    /// A reclaim was already waiting; this request was folded into it.
    Coalesced,
}

/// One registered bucket.
pub(crate) struct Slot {
    pub(crate) id: BucketId,
    pub(crate) engine: Arc<dyn Engine>,
    /// Whether a reclaim is waiting. At most one waits: a request finding it set coalesces.
    pending: AtomicBool,
    wake: Notify,
    pub(crate) tally: Tally,
}

impl Slot {
    pub(crate) fn new(id: BucketId, engine: Arc<dyn Engine>, tally: Tally) -> Self {
        Slot {
            id,
            engine,
            pending: AtomicBool::new(false),
            wake: Notify::new(),
            tally,
        }
    }

    /// Records a request: it becomes the waiting reclaim unless one already waits.
    pub(crate) fn request(&self) -> Requested {
        self.tally.count(Event::Request);
        if self.pending.swap(true, Ordering::SeqCst) {
            self.tally.count(Event::Coalesced);
            tracing::trace!(bucket = %self.id, "reclaim request coalesced");
            return Requested::Coalesced;
        }
        // `notify_one` stores a permit when the worker is busy, so the wake-up is never lost.
        self.wake.notify_one();
        tracing::trace!(bucket = %self.id, "reclaim requested");
        Requested::Queued
    }

    /// Takes the waiting request, if any; a request arriving afterwards waits for the next run.
    pub(crate) fn take_pending(&self) -> bool {
        self.pending.swap(false, Ordering::SeqCst)
    }

    /// Resolves after a request has been queued (possibly one queued earlier).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }
}
