//! [`RedbContext`]: what every redb bucket of a process shares: the bucket budget and the cache
//! budget split into per-bucket shares.
//!
//! redb runs no threads of its own and holds one descriptor per database file, so a database per
//! bucket (self-contained bucket directories) costs only the page cache, which redb sizes per
//! database. The context gives each bucket an even share of one budget instead of redb's 1 GiB
//! default each.

use tidemark_disk::BackendContext;
use tidemark_disk::budget::{BucketBudget, CacheBudget, ResourceBounds};
use tidemark_engine_api::Result;

use crate::error::BACKEND;

/// The smallest cache share a bucket may get: a handful of redb pages (4 KiB each) for the
/// B-tree's upper levels of each table.
pub const MIN_CACHE_BYTES_PER_BUCKET: u64 = 64 << 10;

/// File descriptors one open redb bucket holds: its database file. It is also the bucket's
/// ceiling, which admission reserves: the second descriptor through which the storage syncs the
/// file early (`prepare_durable`) is opened and closed within the call, which the process-wide
/// reserve covers ([`tidemark_disk::budget::FD_RESERVE`]).
pub const FDS_PER_BUCKET: u64 = 1;

/// Resident memory one open, small redb bucket holds besides its cache share (redb's allocator
/// state and region headers, the open tables), bytes; the scale test checks it.
pub const MEMORY_PER_BUCKET: u64 = 512 << 10;

/// Sizes and limits of a [`RedbContext`]: the bucket budget and the page-cache budget split
/// evenly among its buckets (each at least [`MIN_CACHE_BYTES_PER_BUCKET`]). `Default` admits 1,024
/// buckets sharing 1 GiB (redb's default for a single database).
pub type RedbContextOptions = CacheBudget;

/// Shared redb resources; cheap to clone. Open engines keep their share until dropped.
///
/// ```
/// use tidemark_backend_redb::{BackendContext, RedbContext, RedbContextOptions, RedbEngine};
/// use tidemark_engine_api::EngineOptions;
///
/// let context = RedbContext::new(RedbContextOptions { max_buckets: 1, ..Default::default() })?;
/// let dir = tempfile::tempdir()?;
/// let a = RedbEngine::open_in(&context, &dir.path().join("a"), EngineOptions::default())?;
/// let refused = RedbEngine::open_in(&context, &dir.path().join("b"), EngineOptions::default());
/// assert!(matches!(refused, Err(tidemark_engine_api::Error::ResourceLimit { .. })));
/// assert!(!dir.path().join("b").exists(), "a refused open creates nothing");
/// drop(a);
/// let b = RedbEngine::open_in(&context, &dir.path().join("b"), EngineOptions::default())?;
/// # drop(b);
/// # Ok::<(), tidemark_engine_api::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RedbContext {
    settings: RedbContextOptions,
    cache_share: u64,
    budget: BucketBudget,
}

impl RedbContext {
    /// Each bucket's page-cache share, bytes.
    pub fn cache_bytes_per_bucket(&self) -> u64 {
        self.cache_share
    }
}

impl BackendContext for RedbContext {
    type Options = RedbContextOptions;

    /// Creates the budget. Errors: [`tidemark_engine_api::Error::InvalidInput`] when the cache share per
    /// bucket would be below [`MIN_CACHE_BYTES_PER_BUCKET`] or `max_buckets` is 0.
    fn new(settings: RedbContextOptions) -> Result<Self> {
        let cache_share = settings.share(BACKEND, MIN_CACHE_BYTES_PER_BUCKET)?;
        Ok(RedbContext {
            budget: BucketBudget::new(BACKEND, settings.max_buckets, FDS_PER_BUCKET),
            cache_share,
            settings,
        })
    }

    /// A context with the default settings admitting `buckets` buckets (the cache budget stays
    /// the default 1 GiB unless that leaves less than the minimum share, then the minimum each).
    fn for_buckets(buckets: usize) -> Result<Self> {
        Self::new(CacheBudget::for_buckets(
            buckets,
            MIN_CACHE_BYTES_PER_BUCKET,
        ))
    }

    /// The settings it was created with.
    fn settings(&self) -> &RedbContextOptions {
        &self.settings
    }

    fn budget(&self) -> &BucketBudget {
        &self.budget
    }

    /// What `buckets` open buckets of this context hold at most: no thread, a descriptor each
    /// (also their reservation), their cache shares plus [`MEMORY_PER_BUCKET`] each.
    fn bounds(&self, buckets: usize) -> ResourceBounds {
        let n = buckets as u64;
        ResourceBounds {
            threads: 0,
            fds: n * FDS_PER_BUCKET,
            fds_reserved: n * FDS_PER_BUCKET,
            memory_bytes: n * (self.cache_share + MEMORY_PER_BUCKET),
        }
    }
}
