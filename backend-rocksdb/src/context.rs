//! The context many buckets share: one block cache, one memtable budget, one rate limiter and
//! bounded background thread pools for every instance opened from it.
//!
//! Buckets whose directories share a parent share one RocksDB instance ([`crate::instance`]),
//! opened with the context's options; the context's options are cloned from its base options,
//! and the clone shares the base's `shared_ptr`s, so the cache, the write-buffer manager and the
//! rate limiter are one object each, whatever the number of instances.
//!
//! Thread pools: RocksDB runs flushes and compactions on the thread pools of its `Env`, and the
//! default `Env` is a process-wide singleton. The context sizes those pools once (the last context
//! created wins), so the number of background threads is bounded by the pool sizes no matter how
//! many buckets or instances are open.

use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, Env, LogLevel, Options, WriteBufferManager,
};
use tidemark_disk::BackendContext;
use tidemark_disk::budget::{BucketBudget, BucketLease, ResourceBounds, SharedCeiling};
use tidemark_disk::layout::shared::shared_dir_of;
use tidemark_engine_api::Result;

use crate::error::BACKEND;
use crate::instance::SHARED_DIR;
use crate::rocks_err;

/// File descriptors one open RocksDB instance holds besides its table files: its info log, lock
/// file, manifest and log, and up to four handles on its directory (RocksDB keeps one for the
/// database, one shared by the column families it opened with, and one more for each column
/// family it creates after, here `data` and `meta` of a new instance; a reopened one holds two).
/// Counted with `bucket-scale --list-fds`; the scale test checks it.
pub const FIXED_FDS_PER_INSTANCE: u64 = 8;

/// RocksDB's floor for `max_open_files`: it raises any lower value to 20 (`SanitizeOptions`).
pub const MIN_OPEN_FILES: u32 = 20;

/// Of `max_open_files`, the files RocksDB keeps out of its table cache "for other uses": the
/// cache holds at most `max_open_files - 10` table readers (`DBImpl::DBImpl`). The context puts
/// the cache in one shard; in RocksDB's default 64, each shard keeps at least one reader of its
/// own, up to 64 whatever `max_open_files` says.
pub const NON_TABLE_FILES: u64 = 10;

/// Logs an instance may hold open besides its current one: each memtable switch starts a new
/// log and keeps the old one open until RocksDB syncs it, which it does when the next flush
/// begins (`SyncClosedWals`) or on a log sync (`flush_wal(true)`); a column family stops taking
/// writes at 2 unflushed memtables (`max_write_buffer_number`, which the context sets), so at
/// most 2 switches each of `data` and `meta` await a flush.
pub const RETIRED_LOGS_PER_INSTANCE: u64 = 2 * 2;

/// Files an instance opens while its manifest rolls over (the new manifest and the temporary
/// file that becomes `CURRENT`, both before the old manifest closes), or while its info log
/// rolls over (the new log opens before the old one closes).
pub const ROLLOVER_FDS_PER_INSTANCE: u64 = 2 + 1;

/// Resident memory one open, idle bucket holds besides its instance (its engine's state, its
/// filter and its route; its rows' memtable and cache use come out of the shared budgets),
/// bytes. Measured with `bucket-scale` at 10,000 buckets, with headroom.
pub const MEMORY_PER_BUCKET: u64 = 16 << 10;

/// Resident memory one open instance holds besides the shared cache and memtable budget (its
/// column families' structures, its table readers' own memory, idle memtable arenas), bytes.
pub const MEMORY_PER_INSTANCE: u64 = 16 << 20;

/// Threads RocksDB runs besides the flush and compaction pools, whatever the number of buckets
/// (its statistics dumper and the periodic-task scheduler).
pub const ROCKSDB_SERVICE_THREADS: u64 = 2;

/// Sizes and limits of a [`RocksDbContext`]. `Default` suits a process with many small buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocksDbContextOptions {
    /// Block cache shared by every bucket, in bytes (default 64 MiB).
    pub block_cache_bytes: usize,
    /// Memory budget for all memtables of all instances, in bytes (default 128 MiB). Past ~90% of
    /// it the instance being written flushes its memtable.
    pub write_buffer_budget_bytes: usize,
    /// Memtable size of an instance's `data` column family before a flush, in bytes (default
    /// 8 MiB).
    pub write_buffer_bytes: usize,
    /// Flush and compaction write rate across all instances, bytes per second (default
    /// 256 MiB/s; `None` disables the limiter).
    pub rate_limit_bytes_per_sec: Option<u64>,
    /// Threads of the low-priority (compaction) pool shared by the process (default 2).
    pub compaction_threads: u32,
    /// Threads of the high-priority (flush) pool shared by the process (default 1).
    pub flush_threads: u32,
    /// Background jobs one instance may have scheduled at once (default 4).
    pub max_background_jobs: u32,
    /// RocksDB's `max_open_files` of each instance (default 256; lower values than
    /// [`MIN_OPEN_FILES`] count as it): an instance keeps at most 10 fewer table files open
    /// ([`NON_TABLE_FILES`]), and re-opens one it needs beyond that. Its ceiling
    /// ([`RocksDbContextOptions::fd_ceiling`]) grows with it.
    pub max_open_files: u32,
    /// Age after which RocksDB compacts a table file again on its own, in seconds (default one
    /// day; 0 turns it off). The scheduler reclaims a bucket only once enough of it is covered,
    /// and background compactions rarely reach the bottom level, so without this covered entries
    /// in old bottom files could linger indefinitely; periodic compaction runs the watermark
    /// filter over every file at least this often.
    pub periodic_compaction_secs: u64,
    /// The most buckets open from the context at once (default 16,384); an open beyond it, or
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
            max_background_jobs: 4,
            max_open_files: 256,
            periodic_compaction_secs: 24 * 60 * 60,
            max_buckets: 16_384,
        }
    }
}

impl RocksDbContextOptions {
    /// RocksDB's `max_open_files` of each instance, as RocksDB applies it.
    pub fn effective_max_open_files(&self) -> u32 {
        self.max_open_files.max(MIN_OPEN_FILES)
    }

    /// Table readers one instance keeps open at most: its table cache's capacity.
    pub fn table_readers(&self) -> u64 {
        u64::from(self.effective_max_open_files()) - NON_TABLE_FILES
    }

    /// Table files one instance may be writing at once: one per flush or compaction running,
    /// and every one of them (a reclaim's manual compaction included) runs on a thread of the
    /// process's flush and compaction pools, one output file at a time (one subcompaction per
    /// compaction, which the context sets).
    pub fn table_writers(&self) -> u64 {
        u64::from(self.compaction_threads.max(1)) + u64::from(self.flush_threads.max(1))
    }

    /// The most descriptors one open instance may hold, which admission reserves for the first
    /// bucket of it (the others add none, [`tidemark_disk::budget::BucketBudget::sharing`]):
    /// [`FIXED_FDS_PER_INSTANCE`], its table readers, [`RETIRED_LOGS_PER_INSTANCE`], its table
    /// writers and [`ROLLOVER_FDS_PER_INSTANCE`] (264 with the defaults). Opening an instance
    /// stays within it: recovery reads and writes one file at a time while no job runs.
    ///
    /// Not counted: table readers in use at once beyond the table cache's capacity (RocksDB's
    /// cache lets entries in use outgrow it), which takes compactions or iterators reading more
    /// files at once than the cache holds.
    pub fn fd_ceiling(&self) -> u64 {
        FIXED_FDS_PER_INSTANCE
            + self.table_readers()
            + RETIRED_LOGS_PER_INSTANCE
            + self.table_writers()
            + ROLLOVER_FDS_PER_INSTANCE
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
    /// What `buckets` open buckets of this context, siblings sharing one instance, hold at
    /// most: the shared flush and compaction pools (sized once per process) and RocksDB's
    /// service threads, the instance's [`FIXED_FDS_PER_INSTANCE`] descriptors plus its open
    /// table files, and the shared block cache and memtable budget plus
    /// [`MEMORY_PER_INSTANCE`] and [`MEMORY_PER_BUCKET`] each; admission reserves the
    /// instance's [`RocksDbContextOptions::fd_ceiling`] once.
    ///
    /// `tables` is how many table files the instance holds open (RocksDB keeps every table it
    /// reads open, up to [`RocksDbContextOptions::table_readers`]).
    pub fn bounds_holding_tables(&self, buckets: usize, tables: u64) -> ResourceBounds {
        let s = &self.inner.settings;
        let n = buckets as u64;
        let instances = u64::from(buckets > 0);
        let tables = tables.min(s.table_readers());
        ResourceBounds {
            threads: u64::from(s.compaction_threads.max(1) + s.flush_threads.max(1))
                + ROCKSDB_SERVICE_THREADS,
            fds: instances * (FIXED_FDS_PER_INSTANCE + tables),
            fds_reserved: self.inner.budget.fds_reserved(buckets),
            memory_bytes: (s.block_cache_bytes + s.write_buffer_budget_bytes) as u64
                + instances * MEMORY_PER_INSTANCE
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
        base.set_max_background_jobs(to_c_int(settings.max_background_jobs.max(1)));
        // What the descriptor ceiling counts on (`RocksDbContextOptions::fd_ceiling`): the table cache
        // in one shard, so it holds no more readers than its capacity; one output file per
        // compaction; at most 2 unflushed memtables per column family.
        base.set_max_open_files(to_c_int(settings.effective_max_open_files()));
        base.set_table_cache_num_shard_bits(0);
        base.set_max_subcompactions(1);
        base.set_max_write_buffer_number(2);
        base.set_write_buffer_size(settings.write_buffer_bytes.max(64 << 10));
        // Small arena blocks: an instance's idle `meta` memtable must not reserve a megabyte.
        base.set_arena_block_size(64 << 10);
        base.set_compression_type(DBCompressionType::Lz4);
        // Keep the instances' housekeeping files small.
        base.set_log_level(LogLevel::Warn);
        base.set_keep_log_file_num(2);
        base.set_max_log_file_size(1 << 20);
        base.set_max_manifest_file_size(4 << 20);
        base.set_stats_dump_period_sec(0);
        base.set_stats_persist_period_sec(0);
        base.set_max_total_wal_size(64 << 20);
        // Group commit on few cores: the buckets of an instance share one write group, and by
        // default its followers spin waiting for the leader (adaptive yield) and each inserts
        // its own batch into the memtable after the log write (one more wake-up per follower).
        // With both off the leader inserts the group's batches and followers sleep until done:
        // 100 buckets writing synced applies at once went from ~8x to ~12x one bucket alone on
        // the 2-core development machine (`group-commit`); a lone writer leads its own group,
        // so neither setting touches it.
        base.set_enable_write_thread_adaptive_yield(false);
        base.set_allow_concurrent_memtable_write(false);

        Ok(RocksDbContext {
            inner: Arc::new(Inner {
                budget: BucketBudget::sharing(
                    BACKEND,
                    settings.max_buckets,
                    SharedCeiling {
                        per_instance: settings.fd_ceiling(),
                        buckets_per_instance: usize::MAX,
                    },
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

    /// Reserves against the shared instance's directory, where the descriptors are.
    fn admit(&self, bucket_dir: &std::path::Path) -> Result<BucketLease> {
        self.inner
            .budget
            .admit(&shared_dir_of(bucket_dir, SHARED_DIR, BACKEND)?)
    }

    /// Small, reclaimed buckets sharing one instance, holding as many table files as its cache
    /// allows ([`RocksDbContext::bounds_holding_tables`]).
    fn bounds(&self, buckets: usize) -> ResourceBounds {
        self.bounds_holding_tables(buckets, self.inner.settings.table_readers())
    }
}

fn to_c_int(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_counts_what_rocksdb_may_open_per_instance() {
        let defaults = RocksDbContextOptions::default();
        // 8 fixed + 246 table readers + 4 retired logs + 3 table writers + 3 for rollovers.
        assert_eq!(defaults.table_readers(), 246);
        assert_eq!(defaults.table_writers(), 3);
        assert_eq!(defaults.fd_ceiling(), 264);
        let with = |max_open_files, compaction_threads| RocksDbContextOptions {
            max_open_files,
            compaction_threads,
            ..RocksDbContextOptions::default()
        };
        // Below RocksDB's floor counts as the floor; more open files, more readers.
        assert_eq!(with(5, 2).fd_ceiling(), 28);
        assert_eq!(with(64, 2).fd_ceiling(), 28 + 44);
        // Every table writer is a thread of the shared pools.
        assert_eq!(with(20, 6).table_writers(), 7);
        assert_eq!(with(20, 0).table_writers(), 2);
    }

    #[test]
    fn sibling_buckets_reserve_their_instance_once() {
        let context = RocksDbContext::for_buckets(10_000).unwrap();
        assert_eq!(context.inner.budget.fd_ceiling(), 264);
        let bounds = context.bounds_holding_tables(10_000, 2);
        assert_eq!((bounds.fds, bounds.fds_reserved), (8 + 2, 264));
        // However many tables the instance has, it holds no more readers than its cache.
        assert_eq!(
            context.bounds_holding_tables(1, 1000).fds,
            FIXED_FDS_PER_INSTANCE + 246
        );
        assert_eq!(context.bounds(0).fds_reserved, 0);
    }
}
