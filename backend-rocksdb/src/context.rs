//! The context many buckets share: one block cache, one memtable budget, one rate limiter and
//! bounded background thread pools for every engine opened from it.
//!
//! A process hosting hundreds of buckets must not get hundreds of caches, memtable budgets and
//! thread pools. Every engine opened with [`crate::RocksDbEngine::open_in`] clones its RocksDB
//! options from the context's base options; the clone shares the base's `shared_ptr`s, so the
//! cache, the write-buffer manager and the rate limiter are one object each.
//!
//! Thread pools: RocksDB runs flushes and compactions on the thread pools of its `Env`, and the
//! default `Env` is a process-wide singleton. The context sizes those pools once (the last context
//! created wins), so the number of background threads is bounded by the pool sizes no matter how
//! many buckets are open; each bucket's `max_background_jobs` only bounds how many of its own jobs
//! may be queued at a time.

use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, Env, LogLevel, Options, WriteBufferManager,
};
use tidemark_disk::BackendContext;
use tidemark_disk::budget::{BucketBudget, ResourceBounds};
use tidemark_engine_api::Result;

use crate::rocks_err;

/// File descriptors one open RocksDB bucket holds besides its table files: its info log, lock
/// file, manifest and WAL, and up to four handles on its directory (RocksDB keeps one for the
/// database, one shared by the column families it opened with, and one more for each column
/// family it creates after, here `data` and `meta` of a new bucket; a reopened bucket holds two).
/// Counted with `bucket-scale --list-fds`; the scale test checks it.
pub const FIXED_FDS_PER_BUCKET: u64 = 8;

/// RocksDB's floor for `max_open_files`: it raises any lower value to 20 (`SanitizeOptions`).
pub const MIN_OPEN_FILES: u32 = 20;

/// Of `max_open_files`, the files RocksDB keeps out of its table cache "for other uses": the
/// cache holds at most `max_open_files - 10` table readers (`DBImpl::DBImpl`). The context puts
/// the cache in one shard; in RocksDB's default 64, each shard keeps at least one reader of its
/// own, up to 64 whatever `max_open_files` says.
pub const NON_TABLE_FILES: u64 = 10;

/// Logs a bucket may hold open besides its current one: each memtable switch starts a new log
/// and keeps the old one open until RocksDB syncs it, which it does when the next flush begins
/// (`SyncClosedWals`) or on a log sync (`flush_wal(true)`); a column family stops taking writes at 2 unflushed
/// memtables (`max_write_buffer_number`, which the context sets), so at most 2 switches each of
/// `data` and `meta` await a flush.
pub const RETIRED_LOGS_PER_BUCKET: u64 = 2 * 2;

/// Files a bucket opens while its manifest rolls over (the new manifest and the temporary file
/// that becomes `CURRENT`, both before the old manifest closes), or while its info log rolls
/// over (the new log opens before the old one closes).
pub const ROLLOVER_FDS_PER_BUCKET: u64 = 2 + 1;

/// Resident memory one open, small RocksDB bucket holds besides the shared cache and memtable
/// budget (its column families' structures, table readers, an idle memtable arena each), bytes.
pub const MEMORY_PER_BUCKET: u64 = 1 << 20;

/// Threads RocksDB runs besides the flush and compaction pools, whatever the number of buckets
/// (its statistics dumper and the periodic-task scheduler).
pub const ROCKSDB_SERVICE_THREADS: u64 = 2;

/// Sizes and limits of a [`RocksDbContext`]. `Default` suits a process with many small buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocksDbContextOptions {
    /// Block cache shared by every bucket, in bytes (default 64 MiB).
    pub block_cache_bytes: usize,
    /// Memory budget for all memtables of all buckets, in bytes (default 128 MiB). Past ~90% of it
    /// the bucket being written flushes its memtable.
    pub write_buffer_budget_bytes: usize,
    /// Per-bucket memtable size before a flush, in bytes (default 8 MiB).
    pub write_buffer_bytes: usize,
    /// Flush and compaction write rate across all buckets, bytes per second (default 256 MiB/s;
    /// `None` disables the limiter).
    pub rate_limit_bytes_per_sec: Option<u64>,
    /// Threads of the low-priority (compaction) pool shared by the process (default 2).
    pub compaction_threads: u32,
    /// Threads of the high-priority (flush) pool shared by the process (default 1).
    pub flush_threads: u32,
    /// Background jobs one bucket may have scheduled at once (default 2).
    pub max_background_jobs_per_bucket: u32,
    /// RocksDB's `max_open_files` of each bucket (default 20, RocksDB's least,
    /// [`MIN_OPEN_FILES`]; lower values count as it): a bucket keeps at most 10 fewer table
    /// files open ([`NON_TABLE_FILES`]), and re-opens one it needs beyond that. Its ceiling
    /// ([`RocksDbContextOptions::fd_ceiling`]) grows with it, so every bucket open reserves that many
    /// more descriptors.
    pub max_open_files_per_bucket: u32,
    /// Age after which RocksDB compacts a table file again on its own, in seconds (default one
    /// day; 0 turns it off). The scheduler reclaims a bucket only once enough of it is covered,
    /// and background compactions rarely reach the bottom level, so without this covered entries
    /// in old bottom files could linger indefinitely; periodic compaction runs the watermark
    /// filter over every file at least this often.
    pub periodic_compaction_secs: u64,
    /// The most buckets open from the context at once (default 1,024); an open beyond it, or
    /// beyond the process's file-descriptor limit, is [`tidemark_engine_api::Error::ResourceLimit`].
    pub max_buckets: usize,
}

impl Default for RocksDbContextOptions {
    fn default() -> Self {
        RocksDbContextOptions {
            block_cache_bytes: 64 << 20,
            write_buffer_budget_bytes: 128 << 20,
            write_buffer_bytes: 8 << 20,
            rate_limit_bytes_per_sec: Some(256 << 20),
            compaction_threads: 2,
            flush_threads: 1,
            max_background_jobs_per_bucket: 2,
            max_open_files_per_bucket: MIN_OPEN_FILES,
            periodic_compaction_secs: 24 * 60 * 60,
            max_buckets: 1024,
        }
    }
}

impl RocksDbContextOptions {
    /// RocksDB's `max_open_files` of each bucket, as RocksDB applies it.
    pub fn max_open_files(&self) -> u32 {
        self.max_open_files_per_bucket.max(MIN_OPEN_FILES)
    }

    /// Table readers one bucket keeps open at most: its table cache's capacity.
    pub fn table_readers(&self) -> u64 {
        u64::from(self.max_open_files()) - NON_TABLE_FILES
    }

    /// Table files one bucket may be writing at once: RocksDB's per-database limits on its
    /// background jobs (a quarter of `max_background_jobs` flushes, at least one, and the rest
    /// compactions, at least one; `DBImpl::GetBGJobLimits`), one output file each (one
    /// subcompaction per compaction, which the context sets), and the manual compaction of a
    /// reclaim, which RocksDB runs beside them (one at a time: the engine serialises reclaims).
    pub fn table_writers(&self) -> u64 {
        let jobs = u64::from(self.max_background_jobs_per_bucket.max(1));
        let flushes = (jobs / 4).max(1);
        let compactions = jobs.saturating_sub(flushes).max(1);
        flushes + compactions + 1
    }

    /// The most descriptors one open bucket may hold, which admission reserves for it
    /// ([`tidemark_disk::budget::BucketBudget`]): [`FIXED_FDS_PER_BUCKET`], its table readers,
    /// [`RETIRED_LOGS_PER_BUCKET`], its table writers and [`ROLLOVER_FDS_PER_BUCKET`] (28 with
    /// the defaults). Opening a bucket stays within it: recovery reads and writes one file at a
    /// time while no job runs and the table cache is at most a quarter full.
    ///
    /// Not counted: table readers in use at once beyond the table cache's capacity (RocksDB's
    /// cache lets entries in use outgrow it), which takes one compaction or iterator reading
    /// more level-0 files than the cache holds; level 0 is compacted from 4 files on.
    pub fn fd_ceiling(&self) -> u64 {
        FIXED_FDS_PER_BUCKET
            + self.table_readers()
            + RETIRED_LOGS_PER_BUCKET
            + self.table_writers()
            + ROLLOVER_FDS_PER_BUCKET
    }
}

/// Shared RocksDB resources; cheap to clone (an `Arc`). Engines keep their context alive.
#[derive(Clone)]
pub struct RocksDbContext {
    inner: Arc<Inner>,
}

struct Inner {
    budget: BucketBudget,
    base: Options,
    cache: Cache,
    write_buffers: WriteBufferManager,
    settings: RocksDbContextOptions,
}

impl std::fmt::Debug for RocksDbContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbContext")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl RocksDbContext {
    /// What `buckets` open buckets of this context hold at most: the shared flush and
    /// compaction pools (sized once per process) and RocksDB's service threads,
    /// [`FIXED_FDS_PER_BUCKET`] descriptors each plus their open table files, and the shared
    /// block cache and memtable budget plus [`MEMORY_PER_BUCKET`] each; admission reserves
    /// [`RocksDbContextOptions::fd_ceiling`] descriptors each.
    ///
    /// `tables_per_bucket` is how many table files each bucket holds open (RocksDB keeps every
    /// table it reads open, up to [`RocksDbContextOptions::table_readers`]); a small, reclaimed bucket
    /// holds two, one per column family.
    pub fn bounds_holding_tables(&self, buckets: usize, tables_per_bucket: u64) -> ResourceBounds {
        let s = &self.inner.settings;
        let n = buckets as u64;
        let tables = tables_per_bucket.min(s.table_readers());
        ResourceBounds {
            threads: u64::from(s.compaction_threads.max(1) + s.flush_threads.max(1))
                + ROCKSDB_SERVICE_THREADS,
            fds: n * (FIXED_FDS_PER_BUCKET + tables),
            fds_reserved: n * s.fd_ceiling(),
            memory_bytes: (s.block_cache_bytes + s.write_buffer_budget_bytes) as u64
                + n * MEMORY_PER_BUCKET,
        }
    }

    /// Bytes the shared block cache currently holds.
    pub fn block_cache_usage(&self) -> usize {
        self.inner.cache.get_usage()
    }

    /// Bytes all memtables of all buckets currently hold.
    pub fn memtable_usage(&self) -> usize {
        self.inner.write_buffers.get_usage()
    }

    /// A copy of the options every bucket's database starts from (sharing the block cache, the
    /// memtable budget, the rate limiter and the thread pools): the buckets' own, and a raw RocksDB
    /// baseline's tuned exactly like them, so a benchmark compares Tidemark's bookkeeping, not
    /// tuning.
    pub fn db_options(&self) -> Options {
        self.inner.base.clone()
    }
}

impl BackendContext for RocksDbContext {
    type Options = RocksDbContextOptions;

    /// Creates the shared resources and sizes the process's background thread pools.
    fn new(settings: RocksDbContextOptions) -> Result<Self> {
        let mut env = Env::new().map_err(rocks_err)?;
        env.set_background_threads(to_c_int(settings.compaction_threads.max(1)));
        env.set_high_priority_background_threads(to_c_int(settings.flush_threads.max(1)));

        let cache = Cache::new_lru_cache(settings.block_cache_bytes);
        // No stall: a bucket over budget flushes itself; stalling would couple unrelated buckets.
        let write_buffers =
            WriteBufferManager::new_write_buffer_manager(settings.write_buffer_budget_bytes, false);

        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        table.set_cache_index_and_filter_blocks(true);

        let mut base = Options::default();
        base.set_env(&env);
        base.set_write_buffer_manager(&write_buffers);
        base.set_block_based_table_factory(&table);
        if let Some(rate) = settings.rate_limit_bytes_per_sec {
            let rate = i64::try_from(rate.max(1)).unwrap_or(i64::MAX);
            base.set_ratelimiter(rate, 100_000, 10);
        }
        base.set_max_background_jobs(to_c_int(settings.max_background_jobs_per_bucket.max(1)));
        // What the descriptor ceiling counts on (`RocksDbContextOptions::fd_ceiling`): the table cache
        // in one shard, so it holds no more readers than its capacity; one output file per
        // compaction; at most 2 unflushed memtables per column family.
        base.set_max_open_files(to_c_int(settings.max_open_files()));
        base.set_table_cache_num_shard_bits(0);
        base.set_max_subcompactions(1);
        base.set_max_write_buffer_number(2);
        base.set_write_buffer_size(settings.write_buffer_bytes.max(64 << 10));
        // Small arena blocks: hundreds of idle memtables must not each reserve a megabyte.
        base.set_arena_block_size(64 << 10);
        base.set_compression_type(DBCompressionType::Lz4);
        // Keep per-bucket housekeeping files small: hundreds of buckets share one disk.
        base.set_log_level(LogLevel::Warn);
        base.set_keep_log_file_num(2);
        base.set_max_log_file_size(1 << 20);
        base.set_max_manifest_file_size(4 << 20);
        base.set_stats_dump_period_sec(0);
        base.set_stats_persist_period_sec(0);
        base.set_max_total_wal_size(64 << 20);

        Ok(RocksDbContext {
            inner: Arc::new(Inner {
                budget: BucketBudget::new(
                    crate::error::BACKEND,
                    settings.max_buckets,
                    settings.fd_ceiling(),
                ),
                base,
                cache,
                write_buffers,
                settings,
            }),
        })
    }

    /// A context with the default settings admitting `buckets` buckets.
    fn for_buckets(buckets: usize) -> Result<Self> {
        RocksDbContext::new(RocksDbContextOptions {
            max_buckets: buckets.max(1),
            ..RocksDbContextOptions::default()
        })
    }

    /// The settings it was created with.
    fn settings(&self) -> &RocksDbContextOptions {
        &self.inner.settings
    }

    fn budget(&self) -> &BucketBudget {
        &self.inner.budget
    }

    /// Small, reclaimed buckets: two table files each, one per column family
    /// ([`RocksDbContext::bounds_holding_tables`]).
    fn bounds(&self, buckets: usize) -> ResourceBounds {
        self.bounds_holding_tables(buckets, 2)
    }
}

fn to_c_int(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_counts_what_rocksdb_may_open_per_bucket() {
        let defaults = RocksDbContextOptions::default();
        // 8 fixed + 10 table readers + 4 retired logs + 3 table writers + 3 for rollovers.
        assert_eq!(defaults.table_readers(), 10);
        assert_eq!(defaults.table_writers(), 3);
        assert_eq!(defaults.fd_ceiling(), 28);
        let with =
            |max_open_files_per_bucket, max_background_jobs_per_bucket| RocksDbContextOptions {
                max_open_files_per_bucket,
                max_background_jobs_per_bucket,
                ..RocksDbContextOptions::default()
            };
        // Below RocksDB's floor counts as the floor; more open files, more readers.
        assert_eq!(with(5, 2).fd_ceiling(), 28);
        assert_eq!(with(64, 2).fd_ceiling(), 28 + 44);
        // 8 jobs: 2 flushes and 6 compactions, besides the reclaim's manual compaction.
        assert_eq!(with(20, 8).table_writers(), 9);
        assert_eq!(with(20, 0).table_writers(), 3);
    }

    #[test]
    fn the_budget_reserves_the_ceiling_and_bounds_state_it() {
        let context = RocksDbContext::for_buckets(3).unwrap();
        assert_eq!(context.inner.budget.fd_ceiling(), 28);
        let bounds = context.bounds_holding_tables(3, 2);
        assert_eq!((bounds.fds, bounds.fds_reserved), (3 * 10, 3 * 28));
        // However many tables a bucket has, it holds no more readers than its cache.
        assert_eq!(
            context.bounds_holding_tables(1, 1000).fds,
            FIXED_FDS_PER_BUCKET + 10
        );
    }
}
