//! [`OpenStores`]: the bound on how many storages of one context are open at once, and the
//! least-recently-used choice of the idle one that makes room for another.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tidemark_engine_api::{Error, Result};

use crate::budget::{BucketBudget, BucketLease};

/// Open stores a sled or redb context keeps at most by default: 256 small stores hold 256
/// descriptors (a quarter of the usual soft limit of 1,024) and their cache shares, whatever
/// the number of buckets; a bucket beyond them reopens on demand.
pub const DEFAULT_MAX_OPEN_STORES: usize = 256;

/// The longest a storage waits for room when every open store of its context is in use (calls
/// in flight on more buckets than `max_open_stores`); then its call fails with
/// [`Error::ResourceLimit`] naming the bound.
pub const WAIT_FOR_ROOM: Duration = Duration::from_secs(30);

/// How often a storage waiting for room looks again: a store becomes idle when its last call
/// returns, which signals nothing.
const POLL: Duration = Duration::from_millis(2);

/// One bucket's slot as the LRU sees it, whatever its storage type.
pub(crate) trait Slot: Send + Sync {
    /// When its store was last used (a tick of [`OpenStores`]' clock).
    fn last_used(&self) -> u64;

    /// Takes the open store out when no call uses it and it has no background work pending;
    /// the slot is then closing (its callers wait) until [`Slot::finish_release`]. Never
    /// blocks.
    fn claim(&self) -> bool;

    /// Closes and drops the store [`Slot::claim`] took; `false` when it was kept open instead
    /// (its close failed).
    fn finish_release(&self) -> bool;
}

/// The open stores of one context: at most `max_open_stores` storages open at once, each
/// holding a place (and its descriptor reservation) in a budget of that size; opening one more
/// releases the least recently used idle one ([`crate::release`]). Cheap to clone (shared).
#[derive(Clone)]
pub struct OpenStores {
    inner: Arc<Inner>,
}

struct Inner {
    backend: &'static str,
    max_open: usize,
    /// One place per open store: its descriptors are reserved against the process's limit.
    budget: BucketBudget,
    /// Ticks handed out to every use of a store (the LRU order).
    clock: AtomicU64,
    next_id: AtomicU64,
    /// The slots whose store is open now, by id.
    open: Mutex<HashMap<u64, Weak<dyn Slot>>>,
    /// Signalled when a store was released.
    released: Condvar,
    releases: AtomicU64,
    reopens: AtomicU64,
}

impl fmt::Debug for OpenStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenStores")
            .field("backend", &self.inner.backend)
            .field("max_open_stores", &self.inner.max_open)
            .field("open", &self.open_stores())
            .field("releases", &self.releases())
            .finish()
    }
}

impl OpenStores {
    /// At most `max_open_stores` (at least 1) stores of `backend` open at once, each reserving
    /// `fds_per_store` descriptors while open.
    pub fn new(backend: &'static str, max_open_stores: usize, fds_per_store: u64) -> Self {
        let max_open = max_open_stores.max(1);
        OpenStores {
            inner: Arc::new(Inner {
                backend,
                max_open,
                budget: BucketBudget::new(backend, max_open, fds_per_store),
                clock: AtomicU64::new(1),
                next_id: AtomicU64::new(0),
                open: Mutex::new(HashMap::new()),
                released: Condvar::new(),
                releases: AtomicU64::new(0),
                reopens: AtomicU64::new(0),
            }),
        }
    }

    /// The most stores open at once.
    pub fn max_open_stores(&self) -> usize {
        self.inner.max_open
    }

    /// Stores open now.
    pub fn open_stores(&self) -> usize {
        self.inner.budget.open_buckets()
    }

    /// Stores released since the context was created (closed because another needed room).
    pub fn releases(&self) -> u64 {
        self.inner.releases.load(Ordering::Relaxed)
    }

    /// Stores reopened on demand since the context was created.
    pub fn reopens(&self) -> u64 {
        self.inner.reopens.load(Ordering::Relaxed)
    }

    /// The descriptors `buckets` open buckets reserve: those of the stores among them that may
    /// be open at once.
    pub fn fds_reserved(&self, buckets: usize) -> u64 {
        self.inner
            .budget
            .fds_reserved(buckets.min(self.inner.max_open))
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn tick(&self) -> u64 {
        self.inner.clock.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn count_reopen(&self) {
        self.inner.reopens.fetch_add(1, Ordering::Relaxed);
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<u64, Weak<dyn Slot>>> {
        // Each critical section is a map operation or a scan that calls only `Slot` methods,
        // which never panic with it held: the map stays consistent.
        tidemark_engine_api::sync::lock_recovered(&self.inner.open)
    }

    /// Records the slot `id` as holding an open store.
    pub(crate) fn register(&self, id: u64, slot: Weak<dyn Slot>) {
        self.slots().insert(id, slot);
    }

    /// Forgets the slot `id` (its bucket closed).
    pub(crate) fn unregister(&self, id: u64) {
        self.slots().remove(&id);
    }

    /// A place for one more open store for the bucket at `dir` (slot `own`, which is never
    /// released to make it): when the bound is reached (or the descriptor limit refuses), the
    /// least recently used idle store of another bucket is released first; when none is idle,
    /// waits for one up to [`WAIT_FOR_ROOM`].
    pub(crate) fn admit(&self, dir: &Path, own: u64) -> Result<BucketLease> {
        let deadline = Instant::now() + WAIT_FOR_ROOM;
        loop {
            if self.open_stores() >= self.inner.max_open && self.release_one(own) {
                continue;
            }
            match self.inner.budget.admit_within_bound(dir) {
                Ok(Some(lease)) => return Ok(lease),
                // Every place is taken (maybe by a thread that won the one just given back):
                // wait for an idle store below.
                Ok(None) => {}
                // The descriptor limit refused: an idle store's descriptors make room too;
                // without one, the refusal is the answer (waiting frees no descriptor the
                // process holds outside this context).
                Err(refusal @ Error::ResourceLimit { .. }) => {
                    if self.release_one(own) {
                        continue;
                    }
                    return Err(refusal);
                }
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(Error::ResourceLimit {
                    path: dir.to_path_buf(),
                    message: format!(
                        "all {} open {} stores of the context are in use (max_open_stores = {}) \
                         and none became idle within {} s; create the context with a larger \
                         max_open_stores",
                        self.open_stores(),
                        self.inner.backend,
                        self.inner.max_open,
                        WAIT_FOR_ROOM.as_secs()
                    ),
                });
            }
            let slots = self.slots();
            let (slots, _) = self
                .inner
                .released
                .wait_timeout(slots, POLL)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            drop(slots);
        }
    }

    /// Releases the least recently used idle store of a bucket other than `own`; whether one
    /// was released (or at least closing one was tried: a store kept open after a failed
    /// close is registered again and counts as `false`).
    fn release_one(&self, own: u64) -> bool {
        let victim = {
            let mut slots = self.slots();
            slots.retain(|_, slot| slot.strong_count() > 0);
            let mut order: Vec<(u64, u64, Arc<dyn Slot>)> = slots
                .iter()
                .filter(|(id, _)| **id != own)
                .filter_map(|(id, slot)| slot.upgrade().map(|s| (s.last_used(), *id, s)))
                .collect();
            order.sort_unstable_by_key(|(used, id, _)| (*used, *id));
            let found = order.into_iter().find(|(_, _, slot)| slot.claim());
            if let Some((_, id, _)) = &found {
                slots.remove(id);
            }
            found.map(|(_, id, slot)| (id, slot))
        };
        let Some((id, slot)) = victim else {
            return false;
        };
        // Outside the map's lock: closing a store takes a flush, and other buckets' stores
        // are used and opened meanwhile.
        let released = slot.finish_release();
        if released {
            self.inner.releases.fetch_add(1, Ordering::Relaxed);
        } else {
            self.register(id, Arc::downgrade(&slot));
        }
        self.inner.released.notify_all();
        released
    }
}
