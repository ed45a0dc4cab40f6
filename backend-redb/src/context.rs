//! [`RedbContext`]: what every redb bucket of a process shares: the bucket budget and the cache
//! budget split into per-bucket shares.
//!
//! redb runs no threads of its own and holds one descriptor per database file, so a database per
//! bucket (self-contained bucket directories) costs only the page cache, which redb sizes per
//! database. The context gives each bucket an even share of one budget instead of redb's 1 GiB
//! default each.

use tidemark_disk::BackendContext;
use tidemark_disk::budget::{BucketBudget, CacheBudget, ResourceBounds};
use tidemark_disk::release::{DEFAULT_MAX_OPEN_STORES, OpenStores};
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

/// Resident memory one open bucket whose store is released holds, bytes: its engine (the
/// skeleton's state and covered runs) and the release layer's, with no redb database; the
/// scale test checks it.
pub const MEMORY_PER_RELEASED_BUCKET: u64 = 16 << 10;

/// Sizes and limits of a [`RedbContext`]. `Default` admits 1,024 buckets sharing 1 GiB (redb's
/// default for a single database), at most 256 files open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedbContextOptions {
    /// The bucket budget and the page-cache budget, split evenly among the files that may be
    /// open at once (the smaller of `max_buckets` and `max_open_stores`, each at least
    /// [`MIN_CACHE_BYTES_PER_BUCKET`]).
    pub budget: CacheBudget,
    /// The most redb files open at once (default
    /// [`DEFAULT_MAX_OPEN_STORES`](tidemark_disk::release::DEFAULT_MAX_OPEN_STORES), 256): a
    /// bucket beyond them closes the least recently used idle one's file and reopens its own on
    /// demand ([`tidemark_disk::release`]; a writable reopen verifies the file's pages, reading
    /// it once). Admission reserves descriptors for these files only.
    pub max_open_stores: usize,
}

impl Default for RedbContextOptions {
    fn default() -> Self {
        RedbContextOptions {
            budget: CacheBudget::default(),
            max_open_stores: DEFAULT_MAX_OPEN_STORES,
        }
    }
}

/// Shared redb resources; cheap to clone. Open engines keep their share until dropped.
///
/// ```
/// use tidemark_backend_redb::{BackendContext, RedbContext, RedbContextOptions, RedbEngine};
/// use tidemark_engine_api::EngineOptions;
///
/// let budget = tidemark_disk::budget::CacheBudget { max_buckets: 1, ..Default::default() };
/// let context = RedbContext::new(RedbContextOptions { budget, ..Default::default() })?;
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
    /// The bound on open files.
    stores: OpenStores,
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
    /// open file would be below [`MIN_CACHE_BYTES_PER_BUCKET`], or `max_buckets` or
    /// `max_open_stores` is 0.
    fn new(settings: RedbContextOptions) -> Result<Self> {
        if settings.max_open_stores == 0 {
            return Err(tidemark_engine_api::Error::InvalidInput(
                "a redb context must keep at least one file open (max_open_stores)".into(),
            ));
        }
        let cache_share = CacheBudget {
            max_buckets: (settings.budget.max_buckets).min(settings.max_open_stores),
            ..settings.budget
        }
        .share(BACKEND, MIN_CACHE_BYTES_PER_BUCKET)?;
        Ok(RedbContext {
            // A bucket reserves no descriptor of its own: its file does, while open.
            budget: BucketBudget::new(BACKEND, settings.budget.max_buckets, 0),
            stores: OpenStores::new(BACKEND, settings.max_open_stores, FDS_PER_BUCKET),
            cache_share,
            settings,
        })
    }

    /// A context with the default settings admitting `buckets` buckets (the cache budget stays
    /// the default 1 GiB unless that leaves less than the minimum share for each file open at
    /// once, then the minimum each).
    fn for_buckets(buckets: usize) -> Result<Self> {
        let defaults = RedbContextOptions::default();
        let open = buckets.max(1).min(defaults.max_open_stores);
        Self::new(RedbContextOptions {
            budget: CacheBudget {
                max_buckets: buckets.max(1),
                cache_bytes: CacheBudget::for_buckets(open, MIN_CACHE_BYTES_PER_BUCKET).cache_bytes,
            },
            ..defaults
        })
    }

    /// The settings it was created with.
    fn settings(&self) -> &RedbContextOptions {
        &self.settings
    }

    fn budget(&self) -> &BucketBudget {
        &self.budget
    }

    /// What `buckets` open buckets of this context hold at most: no thread; for the files open
    /// at once (at most `max_open_stores`) a descriptor each (also their reservation) and their
    /// cache shares plus [`MEMORY_PER_BUCKET`] each; and [`MEMORY_PER_RELEASED_BUCKET`] for
    /// every bucket.
    fn bounds(&self, buckets: usize) -> ResourceBounds {
        let open = buckets.min(self.stores.max_open_stores()) as u64;
        ResourceBounds {
            threads: 0,
            fds: open * FDS_PER_BUCKET,
            fds_reserved: self.stores.fds_reserved(buckets),
            memory_bytes: open * (self.cache_share + MEMORY_PER_BUCKET)
                + buckets as u64 * MEMORY_PER_RELEASED_BUCKET,
        }
    }

    fn open_stores(&self) -> Option<&OpenStores> {
        Some(&self.stores)
    }
}
