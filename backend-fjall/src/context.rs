//! The context many fjall buckets share: the block cache and the settings of the shared
//! databases they open ([`crate::database`]), and the bucket budget.
//!
//! Threads and descriptors grow with the number of shared databases, not of buckets: the buckets
//! of one directory share databases of up to
//! [`MAX_BUCKETS_PER_DATABASE`](crate::MAX_BUCKETS_PER_DATABASE), each with one worker pool, one
//! journal and one table-file descriptor cache; one block cache serves every database of the
//! context, and the journal budget and the descriptor cache are split among the databases its
//! `max_buckets` buckets fill.
//!
//! A shared database takes the settings of the context that opened it first: a bucket opened
//! from another context joins it as it is (its cache, workers and journal budget), as RocksDB's
//! thread pools are the last context's.

use tidemark_disk::BackendContext;
use tidemark_disk::budget::{BucketBudget, BucketLease, ResourceBounds, SharedCeiling};
use tidemark_engine_api::Result;

use crate::database::{
    DatabaseSettings, MAX_BUCKETS_PER_DATABASE, RECLAIMS_PER_DATABASE, databases_for,
};
use crate::error::BACKEND;
use crate::options::FjallContextOptions;

/// Descriptors a shared database holds besides its cached table files, whatever the number of
/// buckets: its lock file, its journal (and the next one while the journal rotates), its
/// version and its internal keyspace's files, counted with `/proc/self/fd` on databases of
/// idle buckets.
pub const FIXED_FDS_PER_DATABASE: u64 = 9;

/// Resident memory one open, small fjall bucket holds besides the shared cache and write
/// buffers (its keyspace's tree, an idle memtable, its table's metadata and pinned index and
/// filter blocks), bytes. Measured (crate README) and given headroom.
pub const MEMORY_PER_BUCKET: u64 = 128 << 10;

/// Shared fjall settings, the block cache and the bucket budget; cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct FjallContext {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    budget: BucketBudget,
    settings: FjallContextOptions,
    databases: DatabaseSettings,
}

impl std::fmt::Debug for FjallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallContext")
            .field("settings", &self.inner.settings)
            .field("databases", &self.inner.databases)
            .finish_non_exhaustive()
    }
}

impl FjallContext {
    /// The most descriptors one shared database of this context may come to hold, which
    /// admission reserves for each database the buckets of a directory fill:
    /// [`FIXED_FDS_PER_DATABASE`], its share of
    /// [`FjallContextOptions::max_cached_files`], a table file being written by each worker
    /// (a flush or a compaction) and one by each reclaim compacting at once
    /// ([`RECLAIMS_PER_DATABASE`]).
    pub fn fds_per_database(&self) -> u64 {
        fds_per_database(&self.inner.databases)
    }

    /// The settings each shared database is opened with.
    pub(crate) fn database_settings(&self) -> &DatabaseSettings {
        &self.inner.databases
    }
}

impl BackendContext for FjallContext {
    type Options = FjallContextOptions;

    fn budget(&self) -> &BucketBudget {
        &self.inner.budget
    }

    /// Reserves against the directory of the shared databases, where their files are: its
    /// buckets reserve [`FjallContext::fds_per_database`] per database they fill, so a bucket
    /// that joins a database reserves nothing more.
    fn admit(&self, bucket_dir: &std::path::Path) -> Result<BucketLease> {
        self.inner
            .budget
            .admit(&crate::database::shared_dir_of(bucket_dir)?)
    }

    fn new(settings: FjallContextOptions) -> Result<Self> {
        let databases = DatabaseSettings::new(&settings);
        let budget = BucketBudget::sharing(
            BACKEND,
            settings.max_buckets,
            SharedCeiling {
                per_instance: fds_per_database(&databases),
                buckets_per_instance: MAX_BUCKETS_PER_DATABASE,
            },
        );
        Ok(FjallContext {
            inner: std::sync::Arc::new(Inner {
                budget,
                settings,
                databases,
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

    /// What `buckets` open buckets in one directory hold at most: the worker threads of one
    /// shared database per [`MAX_BUCKETS_PER_DATABASE`](crate::MAX_BUCKETS_PER_DATABASE)
    /// buckets, [`FIXED_FDS_PER_DATABASE`] descriptors and a full descriptor cache each (a
    /// database's recovery opens its table files), and admission reserves
    /// [`FjallContext::fds_per_database`] each; the block cache, each database's journal budget
    /// (which bounds its memtables) and [`MEMORY_PER_BUCKET`] each.
    fn bounds(&self, buckets: usize) -> ResourceBounds {
        let d = &self.inner.databases;
        let databases = databases_for(buckets) as u64;
        ResourceBounds {
            threads: databases * d.worker_threads as u64,
            fds: databases * (FIXED_FDS_PER_DATABASE + d.cached_files as u64),
            fds_reserved: self.inner.budget.fds_reserved(buckets.max(1)),
            memory_bytes: self.inner.settings.cache_bytes
                + databases * d.journal_bytes
                + buckets as u64 * MEMORY_PER_BUCKET,
        }
    }
}

/// [`FjallContext::fds_per_database`] of a context whose databases have `databases`.
fn fds_per_database(databases: &DatabaseSettings) -> u64 {
    FIXED_FDS_PER_DATABASE
        + databases.cached_files as u64
        + databases.worker_threads as u64
        + RECLAIMS_PER_DATABASE as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures of the default context sized for 1,000 and for 10,000 buckets: one database
    /// per 999 buckets, each reserving its fixed descriptors, its share of 256 cached table files
    /// and a file per worker and per reclaim; one 64 MiB block cache; journals of 64 MiB each.
    #[test]
    fn bounds_and_reservations_grow_by_database() {
        let ctx = FjallContext::for_buckets(1000).unwrap();
        // Two databases: 128 cached files each.
        assert_eq!(ctx.fds_per_database(), 9 + 128 + 2 + 2);
        let b = ctx.bounds(1000);
        assert_eq!(b.threads, 4);
        assert_eq!(b.fds, 2 * (9 + 128));
        assert_eq!(b.fds_reserved, 2 * 141);
        assert_eq!(b.fds_reserved, ctx.budget().fds_reserved(1000));
        assert_eq!(
            b.memory_bytes,
            (64 << 20) + 2 * (64 << 20) + 1000 * (128 << 10)
        );
        // One bucket reserves a whole database; the 999th adds nothing, the 1,000th a database.
        assert_eq!(ctx.bounds(1).fds_reserved, 141);
        assert_eq!(ctx.bounds(999).fds_reserved, 141);

        let ctx = FjallContext::for_buckets(10_000).unwrap();
        // 11 databases: 23 cached files each.
        assert_eq!(ctx.fds_per_database(), 9 + 23 + 2 + 2);
        let b = ctx.bounds(10_000);
        assert_eq!(b.threads, 22);
        assert_eq!(b.fds, 11 * (9 + 23));
        assert_eq!(b.fds_reserved, 11 * 36);
        assert_eq!(b.fds_reserved, ctx.budget().fds_reserved(10_000));
        assert!(b.fds <= b.fds_reserved);
        // Fits the default soft limit of 1,024 with room for the process's own descriptors.
        assert!(b.fds_reserved + tidemark_disk::budget::FD_RESERVE < 1024 - 64);
        assert_eq!(
            b.memory_bytes,
            (64 << 20) + 11 * (64 << 20) + 10_000 * (128 << 10)
        );
        assert!(b.memory_bytes <= 2 << 30);
    }
}
