//! The context many fjall buckets share: the settings of the shared databases they open
//! ([`crate::database`]), and the bucket budget.
//!
//! Threads and descriptors grow with the number of shared databases, not of buckets: the buckets
//! of one directory share databases of up to
//! [`MAX_BUCKETS_PER_DATABASE`](crate::MAX_BUCKETS_PER_DATABASE), each with one worker pool, one
//! journal, one block cache and one table-file descriptor cache.
//!
//! A shared database takes the settings of the context that opened it first: a bucket opened
//! from another context joins it as it is (its cache, workers and journal budget), as RocksDB's
//! thread pools are the last context's.

use std::sync::Mutex;

use tidemark_disk::BackendContext;
use tidemark_disk::budget::{BucketBudget, BucketLease, ResourceBounds};
use tidemark_engine_api::Result;

use crate::error::BACKEND;

/// Descriptors a shared database holds whatever the number of buckets: its lock file, its
/// journal, its version and meta-keyspace files, counted with `/proc/self/fd` on a database of
/// 1,000 idle buckets. Table files come on top, up to
/// [`FjallContextOptions::max_cached_files`].
pub const FIXED_FDS_PER_DATABASE: u64 = 8;

/// Descriptors one bucket may need at once, which admission reserves: a table file of each of
/// its two keyspaces in the shared descriptor cache, the table file its flush writes and the
/// one its compaction writes.
pub const FDS_PER_BUCKET: u64 = 4;

/// Resident memory one open, small fjall bucket holds besides the shared cache and write
/// buffers (two keyspaces' trees, an idle memtable each), bytes. Measured about 250 KiB per bucket with
/// 1,000 buckets in one database (crate README); doubled for headroom.
pub const MEMORY_PER_BUCKET: u64 = 512 << 10;

/// Sizes and limits of a [`FjallContext`]. `Default` suits a process with many small buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FjallContextOptions {
    /// Block cache of each shared database, bytes (default 64 MiB).
    pub cache_bytes: u64,
    /// Worker threads (flushes and compactions) of each shared database (default 2, at least 1).
    pub worker_threads: usize,
    /// Memtable size of a bucket's data keyspace before it is flushed, bytes (default 8 MiB).
    /// Fixed when the keyspace is created.
    pub memtable_bytes: u64,
    /// Journal size of one shared database past which fjall flushes the keyspaces holding the
    /// oldest journal, bytes (default 128 MiB, at least 64 MiB). It bounds the memtables of all buckets of the
    /// database together: fjall 3 has no separate memtable budget.
    pub journal_budget_bytes: u64,
    /// Table files each shared database keeps open at most (default 256, at least 10).
    pub max_cached_files: usize,
    /// The most buckets open from the context at once (default 1,024); an open beyond it is
    /// [`tidemark_engine_api::Error::ResourceLimit`].
    pub max_buckets: usize,
}

impl Default for FjallContextOptions {
    fn default() -> Self {
        FjallContextOptions {
            cache_bytes: 64 << 20,
            worker_threads: 2,
            memtable_bytes: 8 << 20,
            journal_budget_bytes: 128 << 20,
            max_cached_files: 256,
            max_buckets: 1024,
        }
    }
}

/// Shared fjall settings and the bucket budget; cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct FjallContext {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    budget: BucketBudget,
    settings: FjallContextOptions,
}

impl std::fmt::Debug for FjallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallContext")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl FjallContext {
    /// Admits one more bucket at `dir` (see [`BucketBudget::admit`]).
    pub(crate) fn admit(&self, dir: &std::path::Path) -> Result<BucketLease> {
        self.inner.budget.admit(dir)
    }
}

impl BackendContext for FjallContext {
    type Options = FjallContextOptions;

    fn new(settings: FjallContextOptions) -> Result<Self> {
        Ok(FjallContext {
            inner: std::sync::Arc::new(Inner {
                budget: BucketBudget::new(BACKEND, settings.max_buckets, FDS_PER_BUCKET),
                settings,
            }),
        })
    }

    /// The process-wide default context ([`FjallContextOptions::default`]), created on first
    /// use; `OpenEngine::open` opens engines from it.
    fn global() -> Result<Self> {
        static GLOBAL: Mutex<Option<FjallContext>> = Mutex::new(None);
        tidemark_disk::sync::get_or_try_init(&GLOBAL, "global fjall context", || {
            FjallContext::new(FjallContextOptions::default())
        })
    }

    fn for_buckets(buckets: usize) -> Result<Self> {
        FjallContext::new(FjallContextOptions {
            max_buckets: buckets.max(1),
            ..FjallContextOptions::default()
        })
    }

    fn settings(&self) -> &FjallContextOptions {
        &self.inner.settings
    }

    fn open_buckets(&self) -> usize {
        self.inner.budget.open_buckets()
    }

    /// What `buckets` open buckets in one directory hold at most: the worker threads and
    /// [`FIXED_FDS_PER_DATABASE`] descriptors of one shared database per
    /// [`MAX_BUCKETS_PER_DATABASE`](crate::MAX_BUCKETS_PER_DATABASE) buckets, and at most
    /// [`FjallContextOptions::max_cached_files`] table files (admission reserves
    /// [`FDS_PER_BUCKET`] each), the cache and the journal budget (which bounds the memtables)
    /// plus [`MEMORY_PER_BUCKET`] each.
    fn bounds(&self, buckets: usize) -> ResourceBounds {
        let s = &self.inner.settings;
        let n = buckets as u64;
        // One shared database per `MAX_BUCKETS_PER_DATABASE` buckets, each its own workers.
        let databases = n
            .div_ceil(crate::database::MAX_BUCKETS_PER_DATABASE as u64)
            .max(1);
        let tables = (n * 2)
            .min(databases * s.max_cached_files.max(crate::database::MIN_CACHED_FILES) as u64);
        ResourceBounds {
            threads: databases * s.worker_threads.max(1) as u64,
            fds: databases * FIXED_FDS_PER_DATABASE + tables,
            fds_reserved: (n * FDS_PER_BUCKET).max(databases * FIXED_FDS_PER_DATABASE + tables),
            memory_bytes: s.cache_bytes
                + s.journal_budget_bytes
                    .max(crate::database::MIN_JOURNAL_BUDGET)
                + n * MEMORY_PER_BUCKET,
        }
    }
}
