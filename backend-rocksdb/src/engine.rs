//! [`RocksDbEngine`]: one bucket in one RocksDB database.
//!
//! Layout: the bucket directory holds the Tidemark marker and a `db/` subdirectory with the
//! RocksDB database. Column family `data` maps each key to its tagged value (values and
//! tombstones alike, so the compaction filter sees both; a tombstone is never a RocksDB delete)
//! and carries the watermark compaction filter. Column family `meta` holds the watermark, the
//! applied end and the format version.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use engine_api::batch::validate_key;
use engine_api::codec::{self, FORMAT_VERSION};
use engine_api::watermark::{ProgressCell, reclaim_threshold};
use engine_api::{
    ApplyOutcome, Engine, EngineCounters, EngineOptions, EngineStats, Error, LocalLookup,
    OpenEngine, ReclaimReport, Result, WatermarkUpdate, WriteBatch, layout,
};
use rocksdb::{ColumnFamily, ColumnFamilyDescriptor, DB, FlushOptions, WriteOptions, properties};

use crate::compact;
use crate::context::RocksDbContext;
use crate::covered::CoveredTracker;
use crate::filter::{FilterCounterSnapshot, FilterCounters};
use crate::meta;
use crate::rocks_err;
use crate::suppliers::{WatermarkThreshold, watermark_threshold_filter_factory};

/// Backend name written into the directory marker.
pub const BACKEND: &str = "rocksdb";
/// Subdirectory of the bucket directory holding the RocksDB database.
pub const DB_DIR: &str = "db";
/// Column family of the tagged values.
pub const DATA_CF: &str = "data";
/// Column family of the watermark, applied end and format version.
pub const META_CF: &str = "meta";

/// A Tidemark engine on RocksDB; reclaims with the watermark compaction filter.
///
/// ```no_run
/// use backend_rocksdb::{ContextOptions, RocksDbContext, RocksDbEngine};
/// use engine_api::{Engine, EngineOptions};
///
/// let ctx = RocksDbContext::new(ContextOptions::default())?;
/// let engine = RocksDbEngine::open_in(&ctx, "/tmp/bucket-1".as_ref(), EngineOptions::default())?;
/// engine.put(b"k", b"v", 0)?;
/// engine.advance_watermark(1)?;
/// assert_eq!(engine.reclaim()?.values_removed, 1);
/// # Ok::<(), engine_api::Error>(())
/// ```
pub struct RocksDbEngine {
    // Declared first so it is dropped (closed) before anything the filter factory shares.
    db: DB,
    db_path: PathBuf,
    options: EngineOptions,
    context: RocksDbContext,
    /// `W` (read by the filter through its handle; published only after it is durable) and the
    /// applied end.
    progress: ProgressCell,
    /// What every compaction filter of `data` applies: `W − D`, or a purge threshold while
    /// `reclaim_below` runs.
    filter_threshold: Arc<WatermarkThreshold>,
    /// Serialises `apply`, `advance_watermark` and raw writes: plans read `W` and the applied end.
    writer: Mutex<()>,
    /// Serialises `reclaim`, `reclaim_below` and `compact_to_bottom`: the filter-counter delta over one call belongs
    /// to that call (up to interleaved background compactions), and at most one purge threshold
    /// is in force.
    reclaimer: Mutex<()>,
    covered: Mutex<CoveredTracker>,
    counters: EngineCounters,
    filter_counters: Arc<FilterCounters>,
}

impl std::fmt::Debug for RocksDbEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbEngine")
            .field("db_path", &self.db_path)
            .field("watermark", &self.progress.watermark())
            .field("applied_end", &self.progress.applied_end())
            .finish_non_exhaustive()
    }
}

impl RocksDbEngine {
    /// Opens (creating when missing) the bucket at `path` with the shared resources of `context`.
    pub fn open_in(context: &RocksDbContext, path: &Path, options: EngineOptions) -> Result<Self> {
        layout::claim_directory(path, BACKEND)?;
        let db_path = path.join(DB_DIR);
        let progress = ProgressCell::default();
        let filter_threshold = Arc::new(WatermarkThreshold::new(
            progress.watermark_handle(),
            options.retention_distance,
        ));
        let filter_counters = Arc::new(FilterCounters::default());

        let mut db_opts = context.options();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        let mut data_opts = context.options();
        data_opts.set_compaction_filter_factory(
            watermark_threshold_filter_factory(Arc::clone(&filter_threshold))
                .with_counters(Arc::clone(&filter_counters)),
        );
        let mut meta_opts = context.options();
        meta_opts.set_write_buffer_size(256 << 10);
        let db = DB::open_cf_descriptors(
            &db_opts,
            &db_path,
            [
                ColumnFamilyDescriptor::new(DATA_CF, data_opts),
                ColumnFamilyDescriptor::new(META_CF, meta_opts),
            ],
        )
        .map_err(rocks_err)?;

        let engine = RocksDbEngine {
            db,
            db_path,
            options,
            context: context.clone(),
            progress,
            filter_threshold,
            writer: Mutex::new(()),
            reclaimer: Mutex::new(()),
            covered: Mutex::new(CoveredTracker::default()),
            counters: EngineCounters::default(),
            filter_counters,
        };
        engine.restore_meta()?;
        Ok(engine)
    }

    /// Reads (or, for a new store, writes) the metadata and publishes it in memory.
    fn restore_meta(&self) -> Result<()> {
        let format = self.read_meta(meta::FORMAT_VERSION)?;
        let watermark = self.read_meta(meta::WATERMARK)?;
        let applied_end = self.read_meta(meta::APPLIED_END)?;
        match format {
            Some(v) if v == 0 || v > u64::from(FORMAT_VERSION) => {
                return Err(Error::UnsupportedFormat {
                    path: self.db_path.clone(),
                    found: u32::try_from(v).unwrap_or(u32::MAX),
                    supported: FORMAT_VERSION,
                });
            }
            Some(_) => {}
            None if watermark.is_none() && applied_end.is_none() => {
                self.put_meta_synced(meta::FORMAT_VERSION, u64::from(FORMAT_VERSION))?;
            }
            None => {
                return Err(Error::corrupt(
                    meta::FORMAT_VERSION,
                    "missing from a store that has a watermark or applied end",
                ));
            }
        }
        let applied_end = applied_end.unwrap_or(0);
        self.progress.restore(watermark.unwrap_or(0), applied_end);
        let keys = self.data_property(properties::ESTIMATE_NUM_KEYS)?;
        *self.covered_lock()? = CoveredTracker::seeded(applied_end, keys);
        Ok(())
    }

    /// The context this engine shares resources with.
    pub fn context(&self) -> &RocksDbContext {
        &self.context
    }

    /// The options it was opened with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// The RocksDB database directory (`<bucket>/db`).
    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    /// What the compaction filter did across *every* compaction since open, including RocksDB's
    /// own background compactions (which also remove covered entries; `reclaim` reports only what
    /// happened during its call).
    pub fn filter_counters(&self) -> FilterCounterSnapshot {
        self.filter_counters.snapshot()
    }

    /// Stores `stored` verbatim under `key`, bypassing the codec and the applied end.
    ///
    /// **For corruption tests only** (the conformance suite's raw injection): it lets a test place
    /// bytes the codec would never write, to check that reclamation keeps and counts them.
    #[cfg(any(test, feature = "testing"))]
    pub fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        validate_key(key)?;
        let _writer = self.writer_lock()?;
        let mut opts = WriteOptions::default();
        opts.set_sync(self.options.sync_writes);
        self.db
            .put_cf_opt(self.cf(DATA_CF)?, key, stored, &opts)
            .map_err(rocks_err)
    }

    /// Flushes the memtables of both column families into table files (no compaction, so no
    /// filtering: RocksDB filters only in compactions).
    pub fn flush_memtables(&self) -> Result<()> {
        let mut opts = FlushOptions::default();
        opts.set_wait(true);
        for name in [DATA_CF, META_CF] {
            self.db
                .flush_cf_opt(self.cf(name)?, &opts)
                .map_err(rocks_err)?;
        }
        Ok(())
    }

    /// Flushes the memtables, then compacts the whole `data` column family down to the bottom
    /// level, so everything written so far sits as deep as it goes.
    ///
    /// The compaction filter runs as in any compaction, so entries covered by `W − D` go (that
    /// is always allowed) without being counted in any [`ReclaimReport`]. Tests use it to place
    /// older versions of a key below newer ones (the conformance factory's `settle`). Serialised
    /// with reclaims, so its removals never land in a reclaim's counts.
    pub fn compact_to_bottom(&self) -> Result<()> {
        let _reclaimer = self.reclaimer_lock()?;
        self.flush_memtables()?;
        self.compact_data()
    }

    /// Table files per level of the `data` column family (index = level).
    pub fn data_files_per_level(&self) -> Result<Vec<u64>> {
        (0..7)
            .map(|level| self.data_property(properties::num_files_at_level(level)))
            .collect()
    }

    /// Live table-file bytes of the `data` column family.
    pub fn live_sst_bytes(&self) -> Result<u64> {
        self.data_property(properties::LIVE_SST_FILES_SIZE)
    }

    fn cf(&self, name: &str) -> Result<&ColumnFamily> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| Error::backend(BACKEND, format!("column family {name:?} is missing")))
    }

    fn data_property(&self, name: impl rocksdb::CStrLike) -> Result<u64> {
        Ok(self
            .db
            .property_int_value_cf(self.cf(DATA_CF)?, name)
            .map_err(rocks_err)?
            .unwrap_or(0))
    }

    fn read_meta(&self, key: &[u8]) -> Result<Option<u64>> {
        let value = self
            .db
            .get_pinned_cf(self.cf(META_CF)?, key)
            .map_err(rocks_err)?;
        meta::decode(key, value.as_deref())
    }

    fn put_meta_synced(&self, key: &[u8], value: u64) -> Result<()> {
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db
            .put_cf_opt(self.cf(META_CF)?, key, meta::encode(value), &opts)
            .map_err(rocks_err)
    }

    fn writer_lock(&self) -> Result<MutexGuard<'_, ()>> {
        // A poisoned lock means a panic mid-write elsewhere; refuse rather than guess.
        self.writer
            .lock()
            .map_err(|_| Error::Poisoned { what: "engine" })
    }

    fn covered_lock(&self) -> Result<MutexGuard<'_, CoveredTracker>> {
        self.covered
            .lock()
            .map_err(|_| Error::Poisoned { what: "engine" })
    }

    fn reclaimer_lock(&self) -> Result<MutexGuard<'_, ()>> {
        self.reclaimer
            .lock()
            .map_err(|_| Error::Poisoned { what: "engine" })
    }

    /// Compacts the whole `data` column family down to the bottom level, meeting every table
    /// file once (see [`crate::compact`]).
    fn compact_data(&self) -> Result<()> {
        compact::compact_to_bottom(&self.db, self.cf(DATA_CF)?, DATA_CF)
    }

    /// The reclaim work shared by `reclaim` and `reclaim_below` (the caller holds the reclaim
    /// lock and has put `threshold` in force): flush, then [`compact_data`](Self::compact_data).
    ///
    /// The report's counts are the filter counters' change over the flush and the compaction,
    /// the baseline taken right before the flush. The flush belongs in the window: it can bring L0
    /// to RocksDB's compaction trigger, and the automatic compaction it starts then removes the
    /// covered entries (often before `compact_range` even begins); those removals are this
    /// reclaim's work, and a baseline taken after the flush would miss some or all of them.
    ///
    /// The counts are exact when no other background compaction of this bucket interleaves, the
    /// usual case for a quiet bucket. Otherwise they are approximate: a background compaction
    /// already running when the call starts is credited to it where its removals fall inside the
    /// window, and a corrupt entry that a background and the manual compaction both meet is
    /// counted twice. Nothing covered is missed either way: when the call returns, everything
    /// below `threshold` is physically gone.
    fn reclaim_compaction(&self, threshold: u64, started: Instant) -> Result<ReclaimReport> {
        let counters_before = self.filter_counters.snapshot();
        self.flush_memtables()?;
        let bytes_before = self.live_sst_bytes()?;
        self.compact_data()?;
        let delta = self.filter_counters.snapshot().since(&counters_before);
        let bytes_after = self.live_sst_bytes()?;
        if delta.panics > 0 {
            tracing::error!(
                panics = delta.panics,
                "compaction filter panicked; the entries were kept"
            );
        }
        let report = ReclaimReport {
            threshold,
            values_removed: delta.removed_values,
            tombstones_removed: delta.removed_tombstones,
            corrupt_kept: delta.kept_corrupt,
            bytes_before,
            bytes_after,
            duration: started.elapsed(),
        };
        self.covered_lock()?.reclaimed(threshold);
        self.counters.record_reclaim(&report);
        tracing::debug!(?report, path = %self.db_path.display(), "rocksdb reclaim");
        Ok(report)
    }

    fn threshold(&self) -> u64 {
        reclaim_threshold(self.progress.watermark(), self.options.retention_distance)
    }
}

impl OpenEngine for RocksDbEngine {
    /// Opens from the process-wide default context ([`RocksDbContext::global`]).
    fn open(path: &Path, options: EngineOptions) -> Result<Self> {
        RocksDbEngine::open_in(&RocksDbContext::global()?, path, options)
    }
}

impl Engine for RocksDbEngine {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn apply(&self, batch: &WriteBatch) -> Result<ApplyOutcome> {
        let _writer = self.writer_lock()?;
        let applied_end = self.progress.applied_end();
        let plan = self.progress.plan_apply(batch)?;
        if plan.advances(applied_end) {
            let data = self.cf(DATA_CF)?;
            let mut write = rocksdb::WriteBatch::default();
            for record in &plan.writes {
                write.put_cf(data, record.key(), record.encoded_value());
            }
            // The applied end rides in the same atomic write: a crash never separates them.
            write.put_cf(
                self.cf(META_CF)?,
                meta::APPLIED_END,
                meta::encode(plan.outcome.applied_end),
            );
            let mut opts = WriteOptions::default();
            opts.set_sync(self.options.sync_writes);
            self.db.write_opt(write, &opts).map_err(rocks_err)?;
            self.progress.publish_applied_end(plan.outcome.applied_end);
            if let (Some(first), Some(last)) = (plan.writes.first(), plan.writes.last()) {
                self.covered_lock()?.record(
                    first.offset(),
                    last.offset(),
                    plan.writes.len() as u64,
                );
            }
        }
        self.counters.record_apply(&plan.outcome);
        Ok(plan.outcome)
    }

    fn lookup(&self, key: &[u8]) -> Result<LocalLookup> {
        validate_key(key)?;
        match self
            .db
            .get_pinned_cf(self.cf(DATA_CF)?, key)
            .map_err(rocks_err)?
        {
            Some(bytes) => Ok(LocalLookup::from_decoded(codec::decode(key, &bytes)?)),
            None => Ok(LocalLookup::Miss),
        }
    }

    fn advance_watermark(&self, w: u64) -> Result<WatermarkUpdate> {
        let _writer = self.writer_lock()?;
        // Synced before the filter can see it.
        self.progress
            .advance(w, |v| self.put_meta_synced(meta::WATERMARK, v))
    }

    fn adopt_lake_watermark(&self, lake_end: u64) -> Result<WatermarkUpdate> {
        let _writer = self.writer_lock()?;
        self.progress
            .adopt(lake_end, |v| self.put_meta_synced(meta::WATERMARK, v))
    }

    fn watermark(&self) -> u64 {
        self.progress.watermark()
    }

    fn applied_end(&self) -> u64 {
        self.progress.applied_end()
    }

    /// Flush, then a manual compaction of the whole `data` column family down to and including
    /// the bottom level, during which the filter removes what the watermark covers.
    ///
    /// The report counts what the filter removed during the call: exact for a bucket whose
    /// background compactions do not interleave, approximate otherwise (see the crate README).
    /// Everything covered when the call starts is physically gone when it returns either way.
    fn reclaim(&self) -> Result<ReclaimReport> {
        let started = Instant::now();
        let _reclaimer = self.reclaimer_lock()?;
        self.reclaim_compaction(self.threshold(), started)
    }

    /// The same flush and compaction as [`reclaim`](Engine::reclaim), with the filter's threshold
    /// replaced by `min(threshold, W)` for the duration of the call (see
    /// [`WatermarkThreshold::purge_below`]): removes exactly the entries below it, ignoring the
    /// retention distance, never one at or above `W`.
    fn reclaim_below(&self, threshold: u64) -> Result<ReclaimReport> {
        let started = Instant::now();
        let _reclaimer = self.reclaimer_lock()?;
        let purge = self.filter_threshold.purge_below(threshold);
        self.reclaim_compaction(purge.threshold(), started)
    }

    fn stats(&self) -> Result<EngineStats> {
        let covered_estimate = self.covered_lock()?.estimate(self.threshold());
        Ok(EngineStats {
            watermark: self.watermark(),
            applied_end: self.applied_end(),
            bytes_on_disk: dir_bytes(&self.db_path)?,
            live_entries: self.data_property(properties::ESTIMATE_NUM_KEYS)?,
            live_entries_exact: false,
            covered_estimate,
            counters: self.counters.snapshot(),
        })
    }

    fn flush(&self) -> Result<()> {
        self.db.flush_wal(true).map_err(rocks_err)
    }
}

/// Bytes of the regular files directly inside `dir` (RocksDB keeps its files flat).
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        // A file deleted between listing and stat (an obsolete SST) simply no longer counts.
        if let Ok(meta) = entry.metadata()
            && meta.is_file()
        {
            total = total.saturating_add(meta.len());
        }
    }
    Ok(total)
}
