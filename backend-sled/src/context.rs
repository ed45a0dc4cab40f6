//! [`SledContext`]: what every sled bucket of a process shares: the bucket budget, the cache
//! budget split into per-bucket shares, the one flusher thread and the one rebuild thread.
//!
//! Why a database per bucket and not one database with trees per bucket: a bucket directory stays
//! self-contained (it can be copied, moved, verified, recovered or deleted on its own, and damage
//! to one bucket's files cannot make the others unreadable), and sled already serialises every
//! transaction of the process, so one shared database would gain no write concurrency. What a
//! database per bucket cost was a flusher thread each and a 64 MiB cache each; the context removes
//! both (one flusher thread, a fixed share of one budget), which leaves one file descriptor per
//! bucket (sled's log file) and sled's small per-database structures.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_disk::BackendContext;
use tidemark_disk::budget::{BucketBudget, CacheBudget, ResourceBounds};
use tidemark_disk::release::OpenStores;
use tidemark_engine_api::Result;

use crate::error::BACKEND;
use crate::flusher::Flusher;
use crate::worker::{Rebuild, Rebuilder};

/// The smallest cache share a bucket may get: below it sled would re-read its pages from disk on
/// almost every lookup.
pub const MIN_CACHE_BYTES_PER_BUCKET: u64 = 64 << 10;

/// File descriptors one open sled bucket holds: sled's log file (`db`). It is also the bucket's
/// ceiling, which admission reserves: sled opens its other files only within a call and closes
/// them before it returns (`conf` and a snapshot at open and close, a blob file for a value over
/// its blob threshold), which the process-wide reserve covers
/// ([`tidemark_disk::budget::FD_RESERVE`]).
pub const FDS_PER_BUCKET: u64 = 1;

/// The most threads sled 0.34's process-wide I/O pool runs (its own cap; it starts them on demand
/// and lets idle ones go), whatever the number of databases.
pub const SLED_IO_THREADS: u64 = 128;

/// Resident memory one open, small sled bucket holds besides its cache share, bytes; the scale
/// test checks it. A new bucket holds about 0.3 MiB (sled's page table, the trees); a bucket
/// reopened from disk about 2.3 MiB, because sled's recovery reads its log a 512 KiB segment at
/// a time into zeroed buffers and keeps its segment buffers, and that memory stays resident.
pub const MEMORY_PER_BUCKET: u64 = 3 << 20;

/// Resident memory one open bucket whose store is released holds, bytes: its engine (the
/// skeleton's state and covered runs) and the release layer's, with no sled database; the scale
/// test checks it.
pub const MEMORY_PER_RELEASED_BUCKET: u64 = 16 << 10;

/// Open stores a sled context keeps at most by default: the toolkit's
/// [`DEFAULT_MAX_OPEN_STORES`](tidemark_disk::release::DEFAULT_MAX_OPEN_STORES), 256, a quarter
/// of the usual soft descriptor limit. It was 1,024 while a sled database reopened in a busy
/// process held about 6 MiB (glibc's dynamic mmap threshold, now fixed by the context: see
/// [`SledContextOptions::fixed_mmap_threshold`]); at 1,024 under a limit of 1,024 it was the
/// descriptor limit, not the bound, that released stores, and every admission then probed the
/// process's descriptors, which made opening 10,000 buckets take over ten minutes.
pub const SLED_MAX_OPEN_STORES: usize = tidemark_disk::release::DEFAULT_MAX_OPEN_STORES;

/// Sizes and limits of a [`SledContext`]. `Default` suits a process hosting up to 1,024 buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct SledContextOptions {
    /// The bucket budget and the page-cache budget, split evenly among the buckets (each at least
    /// [`MIN_CACHE_BYTES_PER_BUCKET`]; default 1,024 buckets sharing 1 GiB, sled's default for a
    /// single database). Split among the buckets rather than among the stores open at once, so
    /// the budget holds whatever the open stores' caches fill. (The 1.8 GiB that 1,000
    /// released-and-reopened buckets once held, first blamed on their caches, was glibc's mmap
    /// threshold: see `fixed_mmap_threshold`; the split was not measured again since.)
    pub budget: CacheBudget,
    /// The most sled databases open at once (default [`SLED_MAX_OPEN_STORES`], 256): a bucket
    /// beyond them, or one the process's descriptor limit has no room for, releases the least
    /// recently used idle one's files and reopens its own on demand ([`tidemark_disk::release`]). Admission reserves descriptors for these stores
    /// only, so any number of open buckets needs at most `max_open_stores` descriptors.
    pub max_open_stores: usize,
    /// How often the one flusher thread flushes every open bucket, so writes made with
    /// `sync_writes = false` reach disk (default 500 ms, sled's default; `None`: only synced
    /// writes, watermark changes, explicit flushes and closes flush).
    pub flush_every: Option<Duration>,
    /// The smallest database a reclaim rebuilds into a fresh one (default
    /// [`crate::MIN_REBUILD_BYTES`]; `u64::MAX`: never). Above it a bucket is rebuilt whenever
    /// its database has grown to [`crate::REBUILD_GROWTH`] times its size after the last
    /// rebuild; see the crate README for what that costs and saves.
    pub rebuild_min_bytes: u64,
    /// A bucket is rebuilt when its database has grown to this multiple of its size right
    /// after the last rebuild (default [`crate::REBUILD_GROWTH`]; at least 1: 1 rebuilds at
    /// every reclaim above `rebuild_min_bytes`). The same multiple of what a fresh copy of the
    /// live rows would take calls for one too, whatever `rebuild_min_bytes` (see
    /// [`crate::EMPTY_STORE_BYTES`]).
    pub rebuild_growth: f64,
    /// Whether a reclaim that finds a rebuild due hands it to the context's rebuild thread and
    /// returns after its sweep (default `true`; the thread starts with the first rebuild), or
    /// runs it before it returns (`false`: no thread; what tests that must cross every rebuild
    /// at a known point use).
    pub rebuild_in_background: bool,
    /// Whether a context whose stores will be released (more buckets in its budget than
    /// `max_open_stores`) fixes glibc's mmap threshold for the whole process (default `true`):
    /// without it, a sled database reopened while many others are open holds about 6 MiB
    /// resident instead of 0.25 MiB (see the `malloc` module's docs; Linux with glibc only). A
    /// host that tunes its allocator itself, or uses another one, sets `false`.
    pub fixed_mmap_threshold: bool,
}

impl Default for SledContextOptions {
    fn default() -> Self {
        SledContextOptions {
            budget: CacheBudget::default(),
            max_open_stores: SLED_MAX_OPEN_STORES,
            flush_every: Some(Duration::from_millis(500)),
            rebuild_min_bytes: crate::MIN_REBUILD_BYTES,
            rebuild_growth: crate::REBUILD_GROWTH,
            rebuild_in_background: true,
            fixed_mmap_threshold: true,
        }
    }
}

/// Shared sled resources; cheap to clone (an `Arc`). Open engines keep their context alive.
///
/// ```
/// use tidemark_backend_sled::{BackendContext, SledContext, SledContextOptions, SledEngine};
/// use tidemark_disk::budget::CacheBudget;
/// use tidemark_engine_api::EngineOptions;
///
/// let budget = CacheBudget { max_buckets: 2, ..Default::default() };
/// let context = SledContext::new(SledContextOptions { budget, ..Default::default() })?;
/// let dir = tempfile::tempdir()?;
/// let a = SledEngine::open_in(&context, &dir.path().join("a"), EngineOptions::default())?;
/// let b = SledEngine::open_in(&context, &dir.path().join("b"), EngineOptions::default())?;
/// assert!(SledEngine::open_in(&context, &dir.path().join("c"), EngineOptions::default()).is_err());
/// drop(a); // its share is free again at once
/// let c = SledEngine::open_in(&context, &dir.path().join("c"), EngineOptions::default())?;
/// assert_eq!(context.open_buckets(), 2);
/// # drop((b, c));
/// # Ok::<(), tidemark_engine_api::Error>(())
/// ```
#[derive(Clone)]
pub struct SledContext {
    inner: Arc<Inner>,
}

struct Inner {
    settings: SledContextOptions,
    cache_share: u64,
    budget: BucketBudget,
    /// The bound on open databases.
    stores: OpenStores,
    flusher: Option<Flusher>,
    /// Held by the one bucket rebuilding now (see [`crate::rebuild`]).
    rebuild_slot: Mutex<()>,
    /// Runs the rebuilds reclaims queue, one at a time (see [`crate::worker`]).
    rebuilder: Rebuilder,
}

impl std::fmt::Debug for SledContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledContext")
            .field("settings", &self.inner.settings)
            .field("open_buckets", &self.open_buckets())
            .finish_non_exhaustive()
    }
}

impl SledContext {
    /// Each bucket's page-cache share, bytes.
    pub fn cache_bytes_per_bucket(&self) -> u64 {
        self.inner.cache_share
    }

    /// The context's one rebuild slot, `None` while another bucket holds it: a rebuild opens a
    /// second database beside its bucket's, and one at a time keeps that to one extra log file,
    /// one extra cache share and one copy's worth of CPU per context.
    pub(crate) fn try_rebuild_slot(&self) -> Result<Option<std::sync::MutexGuard<'_, ()>>> {
        match self.inner.rebuild_slot.try_lock() {
            Ok(slot) => Ok(Some(slot)),
            Err(std::sync::TryLockError::WouldBlock) => Ok(None),
            // It guards no state: a rebuild that panicked left nothing to distrust here.
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Ok(Some(poisoned.into_inner())),
        }
    }

    /// Queues a rebuild of `bucket` (marked queued by the caller) for the context's rebuild
    /// thread, starting the thread with the first one.
    pub(crate) fn submit_rebuild<B: Rebuild>(&self, bucket: &Arc<B>) -> Result<()> {
        self.inner.rebuilder.submit(bucket)
    }

    /// Whether the context's rebuild thread has been started (by the first rebuild queued).
    pub fn rebuild_thread_started(&self) -> bool {
        self.inner.rebuilder.started()
    }

    /// Has the flusher thread flush `db` from now on (nothing without a flusher).
    pub(crate) fn register(&self, db: &Arc<sled::Db>) {
        if let Some(flusher) = &self.inner.flusher {
            flusher.register(db);
        }
    }
}

impl BackendContext for SledContext {
    type Options = SledContextOptions;

    fn budget(&self) -> &BucketBudget {
        &self.inner.budget
    }

    /// Creates the budget and starts the flusher thread (if `flush_every` is set).
    ///
    /// Errors: [`tidemark_engine_api::Error::InvalidInput`] when the cache share per bucket would be below
    /// [`MIN_CACHE_BYTES_PER_BUCKET`], `max_buckets` is 0 or `rebuild_growth` is below 1; [`tidemark_engine_api::Error::Backend`] when the thread
    /// cannot be started.
    fn new(settings: SledContextOptions) -> Result<Self> {
        if !(settings.rebuild_growth.is_finite() && settings.rebuild_growth >= 1.0) {
            return Err(tidemark_engine_api::Error::InvalidInput(format!(
                "sled rebuild_growth must be a finite number of at least 1, not {}",
                settings.rebuild_growth
            )));
        }
        if settings.max_open_stores == 0 {
            return Err(tidemark_engine_api::Error::InvalidInput(
                "a sled context must keep at least one store open (max_open_stores)".into(),
            ));
        }
        let cache_share = settings.budget.share(BACKEND, MIN_CACHE_BYTES_PER_BUCKET)?;
        if settings.fixed_mmap_threshold && settings.budget.max_buckets > settings.max_open_stores {
            crate::malloc::fix_mmap_threshold();
        }
        let flusher = settings.flush_every.map(Flusher::start).transpose()?;
        Ok(SledContext {
            inner: Arc::new(Inner {
                // A bucket reserves no descriptor of its own: its store does, while open.
                budget: BucketBudget::new(BACKEND, settings.budget.max_buckets, 0),
                stores: OpenStores::new(BACKEND, settings.max_open_stores, FDS_PER_BUCKET),
                cache_share,
                settings,
                flusher,
                rebuild_slot: Mutex::new(()),
                rebuilder: Rebuilder::default(),
            }),
        })
    }

    /// A context with the default settings admitting `buckets` buckets (the cache budget stays
    /// the default 1 GiB unless that leaves less than the minimum share for each store open at
    /// once, then the minimum each).
    fn for_buckets(buckets: usize) -> Result<Self> {
        Self::new(SledContextOptions {
            budget: CacheBudget::for_buckets(buckets.max(1), MIN_CACHE_BYTES_PER_BUCKET),
            ..SledContextOptions::default()
        })
    }

    /// The settings it was created with.
    fn settings(&self) -> &SledContextOptions {
        &self.inner.settings
    }

    /// What `buckets` open buckets of this context hold at most: the flusher thread, the
    /// rebuild thread (with `rebuild_in_background`, once a rebuild has been queued) and sled's
    /// own I/O pool (process-wide, at most [`SLED_IO_THREADS`]); for the stores open at once
    /// (at most `max_open_stores`) a descriptor each (also their reservation) and their cache
    /// shares plus [`MEMORY_PER_BUCKET`] each; and [`MEMORY_PER_RELEASED_BUCKET`] for every
    /// bucket. A rebuild opens one more database (its log's descriptor and one cache share)
    /// for as long as it runs, one at a time per context, which the process-wide descriptor
    /// reserve covers.
    fn bounds(&self, buckets: usize) -> ResourceBounds {
        let open = buckets.min(self.inner.stores.max_open_stores()) as u64;
        let rebuilder = self.inner.settings.rebuild_in_background
            && self.inner.settings.rebuild_min_bytes != u64::MAX;
        ResourceBounds {
            threads: u64::from(self.inner.flusher.is_some())
                + u64::from(rebuilder)
                + SLED_IO_THREADS,
            fds: open * FDS_PER_BUCKET,
            fds_reserved: self.inner.stores.fds_reserved(buckets),
            memory_bytes: open * (self.cache_bytes_per_bucket() + MEMORY_PER_BUCKET)
                + buckets as u64 * MEMORY_PER_RELEASED_BUCKET,
        }
    }

    fn open_stores(&self) -> Option<&OpenStores> {
        Some(&self.inner.stores)
    }
}
