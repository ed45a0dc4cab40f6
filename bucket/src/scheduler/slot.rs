//! Per-bucket scheduler state: the engine, the single "waiting" flag that coalesces requests,
//! and the wake-up the bucket's worker sleeps on.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Notify, watch};

use super::BucketId;
use super::stats::{Event, Tally};
use tidemark_engine_api::EngineHandle;

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
    pub(crate) engine: EngineHandle,
    /// Whether a reclaim is waiting. At most one waits: a request finding it set coalesces.
    pending: AtomicBool,
    wake: Notify,
    /// `true` from a request until the worker has served every request (run, skipped, failed
    /// for good or dropped) and none waits; see [`Slot::settle`].
    busy: watch::Sender<bool>,
    pub(crate) tally: Tally,
}

impl Slot {
    pub(crate) fn new(id: BucketId, engine: EngineHandle, tally: Tally) -> Self {
        Slot {
            id,
            engine,
            pending: AtomicBool::new(false),
            wake: Notify::new(),
            busy: watch::Sender::new(false),
            tally,
        }
    }

    /// Records a request: it becomes the waiting reclaim unless one already waits.
    pub(crate) fn request(&self) -> Requested {
        self.tally.count(Event::Request);
        let coalesced = self.pending.swap(true, Ordering::SeqCst);
        // After `pending` is set, so `settle` (which reads it under the same watch lock) can
        // never clear `busy` for this request.
        self.busy.send_replace(true);
        if coalesced {
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

    /// Called by the worker whenever it is about to wait for work: marks the slot idle unless a
    /// request is waiting. Runs under the watch's lock, so a concurrent request either sees its
    /// `busy = true` survive or arrives after this and sets it again.
    pub(crate) fn settle(&self) {
        self.busy.send_if_modified(|busy| {
            if *busy && !self.pending.load(Ordering::SeqCst) {
                *busy = false;
                return true;
            }
            false
        });
    }

    /// Marks the slot idle for good (the worker stopped).
    pub(crate) fn stopped(&self) {
        self.busy.send_replace(false);
    }

    /// Resolves once no reclaim of this bucket is running or waiting.
    pub(crate) async fn idle(&self) {
        let mut rx = self.busy.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = rx.wait_for(|busy| !*busy).await;
    }

    /// Resolves after a request has been queued (possibly one queued earlier).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }
}
