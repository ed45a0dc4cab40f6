//! Idle buckets release their files: [`Releasing`] is a [`Storage`] around a backend's storage
//! `S` that opens `S` on demand and closes it again when another bucket of the context needs
//! room, so a process holds open only the stores its buckets use, not one per bucket.
//!
//! Why: a sled or redb bucket holds its database file open (a descriptor, and sled about
//! 250 KiB of memory) for as long as its engine is open, so 10,000 open buckets needed 10,000
//! descriptors. Their engines cannot share a log the way an LSM's buckets can (redb has one
//! writer per file; sled's space reclaiming rebuilds a bucket's database), so instead an open
//! engine whose storage is idle gives its files back, as Apache Fluss does for idle RocksDB
//! buckets, and reopens them on its next call.
//!
//! How:
//!
//! - **A bound per context.** A context that opts in ([`BackendContext::open_stores`]) has
//!   [`OpenStores`]: at most `max_open_stores` inner storages open at once. Each open store
//!   holds a place in a budget of that size (with its descriptor reservation), taken when it
//!   opens and given back when it is released, so a released bucket reserves nothing; the
//!   engine's own place in the context's bucket budget (`max_buckets`) is held for as long as
//!   the engine is open, as before. Opening one store more releases the least recently used
//!   idle one; when every open store is in use, it waits (up to [`WAIT_FOR_ROOM`]).
//! - **Release = clean close, then drop.** A store is released only when no call holds it (a
//!   call clones an `Arc` of the open store under a short lock and calls without it, so `get`
//!   still runs beside writers) and it has no background work pending
//!   ([`Releasable::background_work_pending`]: sled's queued or running rebuild). A writable
//!   store is closed with [`Storage::close`] first (everything durable); a store whose close
//!   fails stays open. Nothing a release does blocks a call or runs under one.
//! - **Reopen on demand.** A call on a released bucket reopens it with what `S::open` needs:
//!   the context, the directory, the options and the engine's watermark handle (the high-water
//!   record is read again). The reopened store must hold at least the watermark and applied end
//!   it was released with, or the call is [`Error::RolledBack`].
//! - **What needs no reopen**: the statistics of a released store (its entries and bytes, kept
//!   from its release), `flush`, `close`, `after_commit`, `prepare_durable` and
//!   `wait_for_background_work` (its close made everything durable and left no background work),
//!   and [`Storage::get_inline`] (a reopen blocks: the lookup goes to a blocking thread, which
//!   reopens). The watermark persists and reclaims do reopen it: a released bucket still gets
//!   both.
//! - **Failure sticks.** A store that failed ([`Storage::check_usable`] refuses, or a call that
//!   may write panicked through this layer) is released without its close and stays failed:
//!   reopening it never launders a failed store.
//! - **Counters** ([`Storage::space_rebuilds`]) add up across reopens.
//!
//! A context that does not opt in (`open_stores()` is `None`) never releases: the layer holds
//! its storage for the engine's whole life.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tidemark_engine_api::covered::MetaRow;
use tidemark_engine_api::{EngineOptions, Error, ReclaimCost, Result, Verifier};

use crate::budget::BucketLease;
use crate::contain::catch_panic;
use crate::context::BackendContext;
use crate::layout::high_water::{self, HighWater};
use crate::meta::{MetaKey, decode_u64};
use crate::storage::{
    CommitRequest, LiveEntries, ReadStored, ReclaimRequest, ReclaimWork, Storage, StorageInit,
};

#[cfg(any(test, feature = "testing"))]
pub mod checks;
#[cfg(any(test, feature = "testing"))]
mod hooks;
mod stores;
#[cfg(test)]
mod tests;

use stores::Slot;
pub use stores::{DEFAULT_MAX_OPEN_STORES, OpenStores, WAIT_FOR_ROOM};

/// A storage [`Releasing`] may close while its bucket is idle.
pub trait Releasable: Storage {
    /// Whether the storage has work running or queued in the background that its close would
    /// cancel (sled: a rebuild); such a store is not released. The default has none.
    fn background_work_pending(&self) -> bool {
        false
    }
}

/// Storage `S`, opened on demand and released while idle (see the [module](self)).
pub struct Releasing<S: Releasable> {
    shared: Arc<Shared<S>>,
    /// The context's bound, when it has one (else the store is never released).
    stores: Option<OpenStores>,
    context: S::Context,
    /// The engine's place in the context's bucket budget, held while the engine is open;
    /// declared last, so it is given back after the store closed.
    _lease: Option<BucketLease>,
}

/// What the layer and the LRU share of one bucket.
struct Shared<S> {
    id: u64,
    dir: PathBuf,
    options: EngineOptions,
    watermark: Arc<AtomicU64>,
    state: Mutex<State<S>>,
    /// Signalled when the state leaves `Closing` or `Reopening`.
    changed: Condvar,
    last_used: AtomicU64,
    /// Set once the store failed: see the module's *Failure sticks*.
    failed: AtomicBool,
    /// Space rebuilds of the stores released so far.
    rebuilds_before: AtomicU64,
    /// Releases of this bucket's store.
    releases: AtomicU64,
}

enum State<S> {
    /// Open; calls clone the `Arc`.
    Open(Arc<S>),
    /// Taken by the LRU, being closed: callers wait.
    Closing(Option<Arc<S>>),
    /// Released, with what it held then.
    Parked(Parked),
    /// A caller is opening it again: other callers wait.
    Reopening,
    /// The engine was dropped.
    Dropped,
}

/// What a released store held when it was closed (it cannot change while released).
#[derive(Debug, Clone, Copy)]
struct Parked {
    live: LiveEntries,
    bytes: u64,
    reached: HighWater,
}

/// The store as a call finds it.
enum Current<S> {
    Open(Arc<S>),
    Parked(Parked),
}

impl<S: Releasable> fmt::Debug for Releasing<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Releasing")
            .field("backend", &S::BACKEND)
            .field("dir", &self.shared.dir)
            .field("open", &self.is_open())
            .field("releases", &self.releases())
            .finish_non_exhaustive()
    }
}

impl<S: Releasable> Releasing<S> {
    /// The open inner storage, reopened when it was released; while the returned `Arc` lives
    /// the store is in use and is not released (for a backend's own diagnostics).
    pub fn inner(&self) -> Result<Arc<S>> {
        self.store()
    }

    /// Whether the inner storage is open now.
    pub fn is_open(&self) -> bool {
        matches!(
            *tidemark_engine_api::sync::lock_recovered(&self.shared.state),
            State::Open(_)
        )
    }

    /// How often this bucket's store has been released.
    pub fn releases(&self) -> u64 {
        self.shared.releases.load(Ordering::Relaxed)
    }

    /// The context's bound on open stores, `None` when the store is never released.
    pub fn open_stores(&self) -> Option<&OpenStores> {
        self.stores.as_ref()
    }

    fn touch(&self) {
        if let Some(stores) = &self.stores {
            self.shared
                .last_used
                .store(stores.tick(), Ordering::Relaxed);
        }
    }

    /// The store as it is now: open (reopened first when `reopen`), or released with its
    /// figures. Waits while another thread closes or reopens it.
    fn current(&self, reopen: bool) -> Result<Current<S>> {
        let mut state = self.shared.lock()?;
        loop {
            match &*state {
                State::Open(store) => {
                    let store = Arc::clone(store);
                    drop(state);
                    self.touch();
                    return Ok(Current::Open(store));
                }
                State::Parked(parked) if !reopen => return Ok(Current::Parked(*parked)),
                State::Parked(_) => break,
                State::Closing(_) | State::Reopening => {
                    state = self
                        .shared
                        .changed
                        .wait(state)
                        .map_err(|_| Error::Poisoned {
                            what: "released store",
                        })?;
                }
                State::Dropped => return Err(Error::Closed),
            }
        }
        let State::Parked(parked) = std::mem::replace(&mut *state, State::Reopening) else {
            return Err(Error::Internal("a released store changed state".into()));
        };
        drop(state);
        // Restores the parked state if the reopen fails or panics (the skeleton contains the
        // panic; the next call tries again).
        let mut guard = ReopenGuard {
            shared: &self.shared,
            parked: Some(parked),
        };
        let store = Arc::new(self.reopen(&parked)?);
        guard.parked = None;
        *self.shared.lock()? = State::Open(Arc::clone(&store));
        self.shared.changed.notify_all();
        if let Some(stores) = &self.stores {
            stores.register(self.shared.id, self.weak_slot());
        }
        self.touch();
        Ok(Current::Open(store))
    }

    fn weak_slot(&self) -> std::sync::Weak<dyn Slot> {
        let weak: std::sync::Weak<Shared<S>> = Arc::downgrade(&self.shared);
        weak
    }

    /// The open store, reopened when released.
    fn store(&self) -> Result<Arc<S>> {
        match self.current(true)? {
            Current::Open(store) => Ok(store),
            Current::Parked(_) => Err(Error::Internal("a reopened store is not open".into())),
        }
    }

    /// Opens the store again for a call: a place among the open stores (releasing another's
    /// when needed), the high-water record read again, `S::open`, and the check that it holds
    /// what it was released with.
    fn reopen(&self, parked: &Parked) -> Result<S> {
        let Some(stores) = &self.stores else {
            return Err(Error::Internal(
                "a store was released without a bound".into(),
            ));
        };
        let lease = stores.admit(&self.shared.dir, self.shared.id)?;
        let recorded = high_water::read(&self.shared.dir)?;
        let store = S::open(
            &self.context,
            StorageInit {
                dir: &self.shared.dir,
                options: &self.shared.options,
                recorded,
                watermark: Arc::clone(&self.shared.watermark),
            },
            lease,
        )?;
        parked.reached.check(&self.shared.dir, &reached(&store)?)?;
        stores.count_reopen();
        tracing::trace!(backend = S::BACKEND, dir = %self.shared.dir.display(),
            "reopened a released store");
        Ok(store)
    }

    /// Runs `f`, a call that may write, on `store`: a panic through it fails the store here
    /// too (as the skeleton fails the engine), so a release never closes a half-done write.
    fn writing<T>(&self, store: &S, f: impl FnOnce(&S) -> Result<T>) -> Result<T> {
        let _mark = PanicMark(&self.shared.failed);
        f(store)
    }

    /// [`Error::StoreFailed`](tidemark_engine_api::Error::StoreFailed) once the store failed.
    fn check_failed(&self) -> Result<()> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(Error::store_failed(&self.shared.dir, None));
        }
        Ok(())
    }

    /// Runs `f` on the store when it is open, else says what a released store answers.
    fn if_open(&self, f: impl FnOnce(&S) -> Result<()>) -> Result<()> {
        match self.current(false)? {
            Current::Open(store) => self.writing(&store, f),
            Current::Parked(_) => self.check_failed(),
        }
    }
}

/// Sets the flag when dropped during a panic.
struct PanicMark<'a>(&'a AtomicBool);

impl Drop for PanicMark<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// Puts a released store's state back when its reopen did not complete.
struct ReopenGuard<'a, S> {
    shared: &'a Shared<S>,
    parked: Option<Parked>,
}

impl<S> Drop for ReopenGuard<'_, S> {
    fn drop(&mut self) {
        if let Some(parked) = self.parked.take() {
            *tidemark_engine_api::sync::lock_recovered(&self.shared.state) = State::Parked(parked);
            self.shared.changed.notify_all();
        }
    }
}

/// The watermark and applied end `store` holds.
fn reached<S: Storage>(store: &S) -> Result<HighWater> {
    let read = |key: MetaKey| -> Result<u64> {
        Ok(store
            .read_meta(key)?
            .map(|bytes| decode_u64(key, &bytes))
            .transpose()?
            .unwrap_or(0))
    };
    Ok(HighWater {
        watermark: read(MetaKey::Watermark)?,
        applied_end: read(MetaKey::AppliedEnd)?,
    })
}

impl<S> Shared<S> {
    fn lock(&self) -> Result<MutexGuard<'_, State<S>>> {
        tidemark_engine_api::sync::lock(&self.state, "released store")
    }
}

impl<S: Releasable> Shared<S> {
    /// Closes `store` (when writable and usable), keeps its figures and drops it; gives it back
    /// when it must stay open (its close or its figures failed).
    fn park(&self, store: Arc<S>) -> std::result::Result<Parked, Arc<S>> {
        let dir = self.dir.display();
        let usable = !self.failed.load(Ordering::Acquire)
            && matches!(
                catch_panic(S::BACKEND, "a usability check", || store.check_usable()),
                Ok(Ok(()))
            );
        if !usable {
            self.failed.store(true, Ordering::Release);
        }
        if usable && self.options.open_mode.writes() {
            match catch_panic(S::BACKEND, "closing an idle store", || store.close()) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(backend = S::BACKEND, dir = %dir, error = %e,
                        "closing an idle store failed; it stays open");
                    return Err(store);
                }
                Err(panic) => {
                    // May have left a write half done: the store fails, as the skeleton's would.
                    self.failed.store(true, Ordering::Release);
                    tracing::error!(backend = S::BACKEND, dir = %dir, error = %panic,
                        "the storage engine panicked closing an idle store; the store must be reopened");
                }
            }
        }
        let figures = catch_panic(S::BACKEND, "the figures of an idle store", || {
            Ok::<_, Error>(Parked {
                live: store.live_entries()?,
                bytes: store.bytes_on_disk()?,
                reached: reached(&*store)?,
            })
        });
        let parked = match figures {
            Ok(Ok(parked)) => parked,
            Ok(Err(e)) | Err(e) => {
                tracing::warn!(backend = S::BACKEND, dir = %dir, error = %e,
                    "reading an idle store's figures failed; it stays open");
                return Err(store);
            }
        };
        if !matches!(
            catch_panic(S::BACKEND, "a usability check", || store.check_usable()),
            Ok(Ok(()))
        ) {
            self.failed.store(true, Ordering::Release);
        }
        if let Err(e) = catch_panic(S::BACKEND, "dropping an idle store", move || drop(store)) {
            tracing::warn!(backend = S::BACKEND, dir = %dir, error = %e,
                "dropping an idle store panicked");
        }
        self.releases.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(backend = S::BACKEND, dir = %dir, "released an idle store");
        Ok(parked)
    }
}

impl<S: Releasable> Slot for Shared<S> {
    fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    fn claim(&self) -> bool {
        let Ok(mut state) = self.state.try_lock() else {
            return false;
        };
        let State::Open(store) = &*state else {
            return false;
        };
        // Only the slot holds it: no call is in flight, and none can start without the lock.
        if Arc::strong_count(store) > 1
            || catch_panic(S::BACKEND, "a background-work check", || {
                store.background_work_pending()
            })
            .unwrap_or(true)
        {
            return false;
        }
        let State::Open(store) = std::mem::replace(&mut *state, State::Closing(None)) else {
            return false;
        };
        // Counted from here on (no call can rebuild it any more), so the figure never dips
        // while it closes.
        self.rebuilds_before
            .fetch_add(store.space_rebuilds(), Ordering::AcqRel);
        *state = State::Closing(Some(store));
        true
    }

    fn finish_release(&self) -> bool {
        let store = match &mut *tidemark_engine_api::sync::lock_recovered(&self.state) {
            State::Closing(store) => store.take(),
            _ => None,
        };
        let Some(store) = store else {
            return false;
        };
        let released = match self.park(store) {
            Ok(parked) => {
                *tidemark_engine_api::sync::lock_recovered(&self.state) = State::Parked(parked);
                true
            }
            Err(store) => {
                let mut state = tidemark_engine_api::sync::lock_recovered(&self.state);
                self.rebuilds_before
                    .fetch_sub(store.space_rebuilds(), Ordering::AcqRel);
                *state = State::Open(store);
                false
            }
        };
        self.changed.notify_all();
        released
    }
}

impl<S: Releasable> Drop for Releasing<S> {
    /// Drops the store (the engine already closed it, [`Storage::close`]) before the engine's
    /// place in the budget is given back.
    fn drop(&mut self) {
        if let Some(stores) = &self.stores {
            stores.unregister(self.shared.id);
        }
        let mut state = tidemark_engine_api::sync::lock_recovered(&self.shared.state);
        // An LRU closing it right now finishes first.
        while matches!(*state, State::Closing(_) | State::Reopening) {
            state = self
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        let previous = std::mem::replace(&mut *state, State::Dropped);
        drop(state);
        drop(previous);
    }
}

impl<S: Releasable> Storage for Releasing<S> {
    const BACKEND: &'static str = S::BACKEND;
    const RECLAIM_COST: ReclaimCost = S::RECLAIM_COST;
    type Context = S::Context;

    /// Opens `S` now (the skeleton reads it at once). With the context's bound, the engine
    /// keeps `lease` (its place among the buckets) and the store takes a place among the open
    /// stores; without one, the store holds `lease` and is never released.
    fn open(context: &S::Context, init: StorageInit<'_>, lease: BucketLease) -> Result<Self> {
        let stores = context.open_stores().cloned();
        let id = stores.as_ref().map_or(0, OpenStores::next_id);
        let (store_lease, engine_lease) = match &stores {
            Some(stores) => (stores.admit(init.dir, id)?, Some(lease)),
            None => (lease, None),
        };
        let shared = Shared {
            id,
            dir: init.dir.to_path_buf(),
            options: init.options.clone(),
            watermark: Arc::clone(&init.watermark),
            state: Mutex::new(State::Dropped),
            changed: Condvar::new(),
            last_used: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            rebuilds_before: AtomicU64::new(0),
            releases: AtomicU64::new(0),
        };
        let store = S::open(context, init, store_lease)?;
        *shared.lock()? = State::Open(Arc::new(store));
        let releasing = Releasing {
            shared: Arc::new(shared),
            stores,
            context: context.clone(),
            _lease: engine_lease,
        };
        if let Some(stores) = &releasing.stores {
            stores.register(id, releasing.weak_slot());
        }
        releasing.touch();
        Ok(releasing)
    }

    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>> {
        self.store()?.read_meta(key)
    }

    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()> {
        let store = self.store()?;
        self.writing(&store, |s| s.persist_meta(key, value))
    }

    fn holds_data(&self) -> Result<bool> {
        self.store()?.holds_data()
    }

    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.store()?.read_meta_rows(prefix)
    }

    fn write_meta_rows(&self, rows: &[MetaRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let store = self.store()?;
        self.writing(&store, |s| s.write_meta_rows(rows))
    }

    fn commit(&self, commit: CommitRequest<'_>) -> Result<()> {
        let store = self.store()?;
        self.writing(&store, |s| s.commit(commit))
    }

    /// A store released since the commit was closed, which made the commit durable.
    fn after_commit(&self, sync: bool) -> Result<()> {
        self.if_open(|s| s.after_commit(sync))
    }

    fn get<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<T> {
        self.store()?.get(key, read)
    }

    /// `None` for a released store: reopening it may block.
    fn get_inline<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<Option<T>> {
        match self.current(false)? {
            Current::Open(store) => store.get_inline(key, read),
            Current::Parked(_) => Ok(None),
        }
    }

    fn reclaim(&self, request: ReclaimRequest<'_>) -> Result<ReclaimWork> {
        let store = self.store()?;
        self.writing(&store, |s| s.reclaim(request))
    }

    fn bytes_on_disk(&self) -> Result<u64> {
        match self.current(false)? {
            Current::Open(store) => store.bytes_on_disk(),
            Current::Parked(parked) => Ok(parked.bytes),
        }
    }

    fn live_entries(&self) -> Result<LiveEntries> {
        match self.current(false)? {
            Current::Open(store) => store.live_entries(),
            Current::Parked(parked) => Ok(parked.live),
        }
    }

    /// A released store was closed: everything it holds is durable.
    fn flush(&self) -> Result<()> {
        self.if_open(|s| s.flush())
    }

    fn prepare_durable(&self) -> Result<()> {
        self.if_open(|s| s.prepare_durable())
    }

    fn close(&self) -> Result<()> {
        self.if_open(|s| s.close())
    }

    fn verify(&self, verifier: &mut Verifier) -> Result<()> {
        self.store()?.verify(verifier)
    }

    fn check_usable(&self) -> Result<()> {
        self.check_failed()?;
        match self.current(false)? {
            Current::Open(store) => store.check_usable(),
            Current::Parked(_) => Ok(()),
        }
    }

    fn wait_for_background_work(&self) -> Result<()> {
        match self.current(false)? {
            Current::Open(store) => store.wait_for_background_work(),
            Current::Parked(_) => self.check_failed(),
        }
    }

    fn space_rebuilds(&self) -> u64 {
        let state = tidemark_engine_api::sync::lock_recovered(&self.shared.state);
        let open = match &*state {
            State::Open(store) => store.space_rebuilds(),
            // A closing store's are counted in `rebuilds_before` already.
            _ => 0,
        };
        self.shared
            .rebuilds_before
            .load(Ordering::Acquire)
            .saturating_add(open)
    }
}
