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

use tidemark_disk::BackendContext;
use tidemark_disk::budget::{BucketBudget, BucketLease, ResourceBounds};
use tidemark_engine_api::Result;

use crate::error::BACKEND;
use crate::options::FjallContextOptions;

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

impl BackendContext for FjallContext {
    type Options = FjallContextOptions;

    fn budget(&self) -> &BucketBudget {
        &self.inner.budget
    }

    /// Reserves against the shared database's directory, where the descriptors are.
    fn admit(&self, bucket_dir: &std::path::Path) -> Result<BucketLease> {
        self.inner
            .budget
            .admit(&crate::database::shared_dir_of(bucket_dir)?)
    }

    fn new(settings: FjallContextOptions) -> Result<Self> {
        Ok(FjallContext {
            inner: std::sync::Arc::new(Inner {
                budget: BucketBudget::new(BACKEND, settings.max_buckets, FDS_PER_BUCKET),
                settings,
            }),
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
