//! [`Chaos`]: a [`Storage`] layer that injects the faults a [`Faults`] plan arms into the storage
//! it wraps, so the product path (the skeleton, the backends' storages) carries no test hooks.
//!
//! `DiskEngine<Chaos<S>>` is the engine of backend `S` with faults: the conformance suite opens
//! every case that way. The layer delegates every call, and at its fault points consults the
//! plan first, inside the skeleton's containment of the call, exactly where the storage would
//! have failed or panicked.

use std::sync::Arc;

use tidemark_engine_api::Verifier;
use tidemark_engine_api::covered::MetaRow;
use tidemark_engine_api::{ReclaimCost, Result};

use super::StorageHooks;
use super::fault::{FaultPoint, Faults};
use crate::budget::BucketLease;
use crate::meta::MetaKey;
use crate::storage::{
    CommitRequest, LiveEntries, ReadStored, ReclaimRequest, ReclaimWork, Storage, StorageInit,
};
use crate::sweeper::SweepTotals;

/// Storage `S` with injected faults ([`Chaos::faults`] arms them).
#[derive(Debug)]
pub struct Chaos<S> {
    inner: S,
    faults: Arc<Faults>,
}

impl<S> Chaos<S> {
    /// The plan this layer consults: arm faults or install a chunk hook here.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The wrapped storage (for its own diagnostics).
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Storage> Storage for Chaos<S> {
    const BACKEND: &'static str = S::BACKEND;
    const RECLAIM_COST: ReclaimCost = S::RECLAIM_COST;
    type Context = S::Context;

    fn open(context: &S::Context, init: StorageInit<'_>, lease: BucketLease) -> Result<Self> {
        Ok(Chaos {
            inner: S::open(context, init, lease)?,
            faults: Arc::new(Faults::new()),
        })
    }

    fn remove(context: &S::Context, dir: &std::path::Path) -> Result<()> {
        S::remove(context, dir)
    }

    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>> {
        self.inner.read_meta(key)
    }

    /// [`FaultPoint::Watermark`] strikes the durable write of `W`.
    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()> {
        if key == MetaKey::Watermark {
            self.faults.check(FaultPoint::Watermark)?;
        }
        self.inner.persist_meta(key, value)
    }

    fn holds_data(&self) -> Result<bool> {
        self.inner.holds_data()
    }

    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.inner.read_meta_rows(prefix)
    }

    fn write_meta_rows(&self, rows: &[MetaRow]) -> Result<()> {
        self.inner.write_meta_rows(rows)
    }

    /// [`FaultPoint::Commit`] strikes before the storage writes anything, as a full disk would.
    fn commit(&self, commit: CommitRequest<'_>) -> Result<()> {
        self.faults.check(FaultPoint::Commit)?;
        self.inner.commit(commit)
    }

    fn after_commit(&self, sync: bool) -> Result<()> {
        self.inner.after_commit(sync)
    }

    fn get<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<T> {
        self.inner.get(key, read)
    }

    fn get_inline<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<Option<T>> {
        self.inner.get_inline(key, read)
    }

    /// Hands the sweeper the plan's chunk hook (and the request's own, if any); with [`FaultPoint::Reclaim`] armed, first really
    /// reclaims below half the threshold (the work done before the fault), then fails.
    fn reclaim(&self, request: ReclaimRequest<'_>) -> Result<ReclaimWork> {
        // The plan's hook, then whatever a layer around this one observes.
        let outer = request.on_chunk;
        let hook = |chunk: &SweepTotals| {
            self.faults.chunk_committed(chunk);
            if let Some(outer) = outer {
                outer(chunk);
            }
        };
        let request = ReclaimRequest {
            on_chunk: Some(&hook),
            ..request
        };
        if self.faults.armed(FaultPoint::Reclaim) > 0 {
            self.inner.reclaim(ReclaimRequest {
                threshold: request.threshold / 2,
                ..request
            })?;
            self.faults.check(FaultPoint::Reclaim)?;
        }
        self.inner.reclaim(request)
    }

    fn bytes_on_disk(&self) -> Result<u64> {
        self.inner.bytes_on_disk()
    }

    fn live_entries(&self) -> Result<LiveEntries> {
        self.inner.live_entries()
    }

    /// [`FaultPoint::Flush`] strikes before the storage flushes.
    fn flush(&self) -> Result<()> {
        self.faults.check(FaultPoint::Flush)?;
        self.inner.flush()
    }

    fn prepare_durable(&self) -> Result<()> {
        self.inner.prepare_durable()
    }

    fn close(&self) -> Result<()> {
        self.inner.close()
    }

    fn verify(&self, verifier: &mut Verifier) -> Result<()> {
        self.inner.verify(verifier)
    }

    fn check_usable(&self) -> Result<()> {
        self.inner.check_usable()
    }

    fn wait_for_background_work(&self) -> Result<()> {
        self.inner.wait_for_background_work()
    }

    fn space_rebuilds(&self) -> u64 {
        self.inner.space_rebuilds()
    }
}

impl<S: StorageHooks> StorageHooks for Chaos<S> {
    fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        self.inner.insert_raw(key, stored)
    }

    fn insert_index_row(&self, row: &[u8]) -> Result<()> {
        self.inner.insert_index_row(row)
    }

    fn remove_index_row(&self, row: &[u8]) -> Result<bool> {
        self.inner.remove_index_row(row)
    }

    fn settle(&self) -> Result<()> {
        self.inner.settle()
    }
}
