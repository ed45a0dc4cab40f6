//! [`RocksDbStorage`]: the storage primitives of the RocksDB backend under the shared
//! [`DiskEngine`](tidemark_disk::DiskEngine).
//!
//! Column family `data` maps each key to its tagged value (values and tombstones alike, so the
//! compaction filter sees both; a tombstone is never a RocksDB delete) and carries the watermark
//! compaction filter. Column family `meta` holds the watermark, the applied end and the format
//! version under [`MetaKey::bytes`].

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tidemark_disk::BackendContext;

use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DB, DBRecoveryMode, ErrorKind, FlushOptions, ReadOptions,
    ReadTier, WriteOptions, properties,
};
use tidemark_disk::budget::BucketLease;
use tidemark_disk::layout::FileStart;
use tidemark_disk::meta::encode_u64;
use tidemark_disk::{
    CommitRequest, LiveEntries, MetaKey, ReadStored, ReclaimRequest, ReclaimWork, Storage,
    StorageInit,
};
use tidemark_engine_api::Verifier;
use tidemark_engine_api::covered::MetaRow;
use tidemark_engine_api::{Error, ReclaimCost, Result};

use crate::compact;
use crate::context::RocksDbContext;
use crate::rocks_err;
use crate::suppliers::{WatermarkThreshold, watermark_threshold_filter_factory};
use tidemark_disk::compaction_policy::FilterCounters;

/// Backend name written into the directory marker.
pub use crate::error::BACKEND;
/// Subdirectory of the bucket directory holding the RocksDB database.
pub const DB_DIR: &str = "db";
/// Column family of the tagged values.
pub const DATA_CF: &str = "data";
/// Column family of the watermark, applied end and format version.
pub const META_CF: &str = "meta";

/// One bucket's RocksDB database and what its compaction filter shares with the engine.
pub struct RocksDbStorage {
    // Declared first so it is dropped (closed) before anything the filter factory shares.
    db: DB,
    db_path: PathBuf,
    context: RocksDbContext,
    /// What every compaction filter of `data` applies: `W − D`, or a purge threshold while
    /// `reclaim_below` runs.
    filter_threshold: Arc<WatermarkThreshold>,
    filter_counters: Arc<FilterCounters>,
    /// This bucket's place in the context's budget, given back after the database is closed.
    _lease: BucketLease,
}

impl std::fmt::Debug for RocksDbStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbStorage")
            .field("db_path", &self.db_path)
            .finish_non_exhaustive()
    }
}

impl RocksDbStorage {
    /// The context this bucket shares resources with.
    pub fn context(&self) -> &RocksDbContext {
        &self.context
    }

    /// The RocksDB database directory (`<bucket>/db`).
    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    /// The counters of every compaction filter of `data` since open.
    pub fn filter_counters(&self) -> &FilterCounters {
        &self.filter_counters
    }

    /// Flushes the memtables of both column families into table files (no compaction, so no
    /// filtering: RocksDB filters only in compactions).
    pub(crate) fn flush_memtables(&self) -> Result<()> {
        let mut opts = FlushOptions::default();
        opts.set_wait(true);
        for name in [DATA_CF, META_CF] {
            self.db
                .flush_cf_opt(self.cf(name)?, &opts)
                .map_err(rocks_err)?;
        }
        Ok(())
    }

    /// Flushes, then compacts the whole `data` column family down to the bottom level, so
    /// everything written so far sits as deep as it goes. The compaction filter runs as in any
    /// compaction, so entries covered by `W − D` go without being counted in any reclaim's
    /// report. Call it through
    /// [`DiskEngine::with_reclaimer`](tidemark_disk::DiskEngine::with_reclaimer), which
    /// serialises it with reclaims (tests use it to place older versions of a key below newer
    /// ones).
    pub(crate) fn compact_to_bottom(&self) -> Result<()> {
        self.flush_memtables()?;
        compact::compact_to_bottom(&self.db, self.cf(DATA_CF)?, DATA_CF)
    }

    /// An integer property of the `data` column family (0 when RocksDB does not report it).
    pub(crate) fn data_property(&self, name: impl rocksdb::CStrLike) -> Result<u64> {
        Ok(self
            .db
            .property_int_value_cf(self.cf(DATA_CF)?, name)
            .map_err(rocks_err)?
            .unwrap_or(0))
    }

    /// Table files per level of the `data` column family (index = level).
    pub(crate) fn data_files_per_level(&self) -> Result<Vec<u64>> {
        (0..7)
            .map(|level| self.data_property(properties::num_files_at_level(level)))
            .collect()
    }

    /// Live table-file bytes of the `data` column family.
    pub(crate) fn live_sst_bytes(&self) -> Result<u64> {
        self.data_property(properties::LIVE_SST_FILES_SIZE)
    }

    fn add_meta_rows(&self, write: &mut rocksdb::WriteBatch, rows: &[MetaRow]) -> Result<()> {
        let meta = self.cf(META_CF)?;
        for row in rows {
            match &row.value {
                Some(value) => write.put_cf(meta, row.name.as_bytes(), value),
                None => write.delete_cf(meta, row.name.as_bytes()),
            }
        }
        Ok(())
    }

    fn cf(&self, name: &str) -> Result<&ColumnFamily> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| Error::backend(BACKEND, format!("column family {name:?} is missing")))
    }

    /// Iterates the whole column family `name` with every block's checksum verified (and the
    /// block cache left alone), calling `visit` per row. A checksum mismatch (RocksDB reports any
    /// corruption it meets this way) is a finding, reported with the last key read before it;
    /// any other error ends the check.
    fn scan_verified(
        &self,
        name: &str,
        verifier: &mut Verifier,
        mut visit: impl FnMut(&mut Verifier, &[u8], &[u8]),
    ) -> Result<()> {
        let mut opts = ReadOptions::default();
        opts.set_verify_checksums(true);
        opts.fill_cache(false);
        let mut iter = self.db.raw_iterator_cf_opt(self.cf(name)?, opts);
        iter.seek_to_first();
        let mut last_key: Option<Vec<u8>> = None;
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            visit(verifier, key, value);
            let last = last_key.get_or_insert_with(Vec::new);
            last.clear();
            last.extend_from_slice(key);
            iter.next();
        }
        match iter.status() {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::Corruption => {
                verifier.engine_check_failed(last_key.as_deref(), format!("{name}: {e}"));
                Ok(())
            }
            Err(e) => Err(rocks_err(e)),
        }
    }

    /// The work of one reclaim, with the threshold already in force in the filter: flush, then
    /// compact everything to the bottom level.
    ///
    /// The counts are the filter counters' change over the flush and the compaction, the
    /// baseline taken right before the flush. The flush belongs in the window: it can bring L0 to
    /// RocksDB's compaction trigger, and the automatic compaction it starts then removes the
    /// covered entries (often before `compact_range` even begins); those removals are this
    /// reclaim's work, and a baseline taken after the flush would miss some or all of them.
    ///
    /// The counts are exact when no other background compaction of this bucket interleaves, the
    /// usual case for a quiet bucket. Otherwise they are approximate: a background compaction
    /// already running when the call starts is credited to it where its removals fall inside the
    /// window, and a corrupt entry that a background and the manual compaction both meet is
    /// counted twice. Nothing covered is missed either way: when the call returns, everything
    /// below `threshold` is physically gone.
    fn reclaim_compaction(&self) -> Result<ReclaimWork> {
        let counters_before = self.filter_counters.snapshot();
        self.flush_memtables()?;
        let bytes_before = self.live_sst_bytes()?;
        let files_before: HashSet<String> = compact::table_files(&self.db, DATA_CF)?
            .into_iter()
            .map(|f| f.name)
            .collect();
        compact::compact_to_bottom(&self.db, self.cf(DATA_CF)?, DATA_CF)?;
        let delta = self.filter_counters.snapshot().since(&counters_before);
        let bytes_after = self.live_sst_bytes()?;
        // What the compaction wrote, from RocksDB's own file metadata: every live table file
        // that did not exist once the flush was done is one of its outputs (or, rarely, of a
        // background compaction in the same window, which this reclaim's flush may have set off).
        let bytes_rewritten = compact::table_files(&self.db, DATA_CF)?
            .into_iter()
            .filter(|f| !files_before.contains(&f.name))
            .map(|f| f.size as u64)
            .sum();
        Ok(delta.reclaim_work(
            &self.db_path,
            bytes_before,
            bytes_after,
            Some(bytes_rewritten),
        ))
    }
}

impl Storage for RocksDbStorage {
    const BACKEND: &'static str = BACKEND;
    /// A compaction of the bucket rewrites its live data.
    const RECLAIM_COST: ReclaimCost = ReclaimCost::Rewrite;
    type Context = RocksDbContext;

    /// Opens the database under `init.dir` with the shared resources of `context`; the filter
    /// reads `init.watermark`. It is created when missing if `init.options.open_mode` creates;
    /// otherwise it must exist ([`Error::NoStore`] when it does not), and
    /// [`OpenMode::ReadOnly`](tidemark_engine_api::OpenMode::ReadOnly) opens it with RocksDB's read-only
    /// open, which writes nothing (not even its info log).
    fn open(context: &RocksDbContext, init: StorageInit<'_>, lease: BucketLease) -> Result<Self> {
        let db_path = init.dir.join(DB_DIR);
        let mode = init.options.open_mode;
        // Checked first: the Rust binding creates the database directory before any open.
        init.require_engine_file(
            &db_path.join("CURRENT"),
            "RocksDB database",
            FileStart::Header,
        )?;
        let filter_threshold = Arc::new(WatermarkThreshold::new(
            init.watermark,
            init.options.retention_distance,
        ));
        let filter_counters = Arc::new(FilterCounters::default());

        let mut db_opts = context.db_options();
        db_opts.create_if_missing(mode.creates());
        db_opts.create_missing_column_families(mode.creates());
        // A damaged log must not be replayed up to the damage and served as the whole store:
        // a checksum failure anywhere in the log fails the open (only an incomplete record at
        // the very end, a write a crash tore, is dropped), and the sizes of closed logs are
        // recorded in the manifest, so a missing or shortened one fails it too. What this does
        // not see (a log cut at a record boundary, or zeroed) the high-water record bounds.
        db_opts.set_wal_recovery_mode(DBRecoveryMode::TolerateCorruptedTailRecords);
        db_opts.set_track_and_verify_wals_in_manifest(true);
        let mut data_opts = context.db_options();
        data_opts.set_periodic_compaction_seconds(context.settings().periodic_compaction_secs);
        data_opts.set_compaction_filter_factory(
            watermark_threshold_filter_factory(Arc::clone(&filter_threshold))
                .with_counters(Arc::clone(&filter_counters)),
        );
        let mut meta_opts = context.db_options();
        meta_opts.set_write_buffer_size(256 << 10);
        let families = [
            ColumnFamilyDescriptor::new(DATA_CF, data_opts),
            ColumnFamilyDescriptor::new(META_CF, meta_opts),
        ];
        let db = if mode.writes() {
            DB::open_cf_descriptors(&db_opts, &db_path, families)
        } else {
            // Replays the WAL into memory, never into files.
            DB::open_cf_descriptors_read_only(&db_opts, &db_path, families, false)
        }
        // RocksDB's recovery errors ("Corruption: checksum mismatch") do not always name the
        // database they came from.
        .map_err(|e| {
            Error::backend(
                BACKEND,
                format!("opening the RocksDB database {}: {e}", db_path.display()),
            )
        })?;
        Ok(RocksDbStorage {
            db,
            db_path,
            context: context.clone(),
            filter_threshold,
            filter_counters,
            _lease: lease,
        })
    }

    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>> {
        self.db
            .get_cf(self.cf(META_CF)?, key.bytes())
            .map_err(|e| read_err(key.bytes(), e))
    }

    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()> {
        // A synced write also syncs the WAL holding every earlier write.
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db
            .put_cf_opt(self.cf(META_CF)?, key.bytes(), encode_u64(value), &opts)
            .map_err(rocks_err)
    }

    fn holds_data(&self) -> Result<bool> {
        let mut iter = self.db.raw_iterator_cf(self.cf(DATA_CF)?);
        iter.seek_to_first();
        iter.status().map_err(rocks_err)?;
        Ok(iter.valid())
    }

    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let mut iter = self.db.raw_iterator_cf(self.cf(META_CF)?);
        iter.seek(prefix.as_bytes());
        let mut rows = Vec::new();
        while let (Some(name), Some(value)) = (iter.key(), iter.value()) {
            if !name.starts_with(prefix.as_bytes()) {
                break;
            }
            let name = String::from_utf8(name.to_vec())
                .map_err(|_| Error::corrupt(name, "metadata row name is not UTF-8".to_owned()))?;
            rows.push((name, value.to_vec()));
            iter.next();
        }
        iter.status().map_err(rocks_err)?;
        Ok(rows)
    }

    fn write_meta_rows(&self, rows: &[MetaRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut write = rocksdb::WriteBatch::default();
        self.add_meta_rows(&mut write, rows)?;
        self.db.write(write).map_err(rocks_err)
    }

    fn commit(&self, commit: CommitRequest<'_>) -> Result<()> {
        let data = self.cf(DATA_CF)?;
        let mut write = rocksdb::WriteBatch::default();
        for record in commit.writes {
            write.put_cf(data, record.key(), record.encoded_value());
        }
        // The applied end rides in the same atomic write: a crash never separates them.
        write.put_cf(
            self.cf(META_CF)?,
            MetaKey::AppliedEnd.bytes(),
            encode_u64(commit.applied_end),
        );
        self.add_meta_rows(&mut write, commit.rows)?;
        let mut opts = WriteOptions::default();
        opts.set_sync(commit.sync);
        self.db.write_opt(write, &opts).map_err(rocks_err)
    }

    /// A read restricted to the memtables and the block cache (`ReadTier::BlockCache`):
    /// RocksDB answers `Incomplete` instead of reading a table file, and then the read goes to a
    /// blocking thread.
    fn get_inline<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<Option<T>> {
        let mut opts = ReadOptions::default();
        opts.set_read_tier(ReadTier::BlockCache);
        match self.db.get_pinned_cf_opt(self.cf(DATA_CF)?, key, &opts) {
            Ok(value) => read(value.as_deref()).map(Some),
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => Ok(None),
            Err(e) => Err(read_err(key, e)),
        }
    }

    fn get<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<T> {
        let value = self
            .db
            .get_pinned_cf(self.cf(DATA_CF)?, key)
            .map_err(|e| read_err(key, e))?;
        read(value.as_deref())
    }

    /// A reclaim is a flush and a manual compaction of the whole `data` column family down to
    /// and including the bottom level, during which the filter removes what the threshold
    /// covers. A purge (`reclaim_below`) puts its threshold in the filter for the duration of
    /// the call (see [`WatermarkThreshold::purge_below`]); a plain reclaim's threshold is the
    /// filter's own `W − D`.
    fn reclaim(&self, request: ReclaimRequest<'_>) -> Result<ReclaimWork> {
        // Held for the whole compaction; dropping it restores `W − D`.
        let _purge = request
            .purge
            .then(|| self.filter_threshold.purge_below(request.threshold));
        self.reclaim_compaction()
    }

    fn bytes_on_disk(&self) -> Result<u64> {
        dir_bytes(&self.db_path)
    }

    fn live_entries(&self) -> Result<LiveEntries> {
        Ok(LiveEntries {
            count: self.data_property(properties::ESTIMATE_NUM_KEYS)?,
            exact: false,
        })
    }

    fn flush(&self) -> Result<()> {
        self.db.flush_wal(true).map_err(rocks_err)
    }

    /// Syncs the log alongside the writers, so the synced write of a watermark change has only
    /// its own record to sync.
    fn prepare_durable(&self) -> Result<()> {
        self.flush()
    }

    /// Flushes the memtables into table files (and the log), so a cleanly closed store reopens
    /// from its table files and manifest alone: damage to the log after a clean close loses
    /// nothing.
    fn close(&self) -> Result<()> {
        self.flush_memtables()?;
        self.flush()
    }

    /// Every row of `data` must decode below the applied end; both column families are read in
    /// full with RocksDB's block checksums verified (RocksDB keeps no offset index to compare).
    fn verify(&self, verifier: &mut Verifier) -> Result<()> {
        verifier.engine_check("rocksdb block checksums (every block of both column families)");
        self.scan_verified(DATA_CF, verifier, |v, key, stored| {
            v.data_row(key, stored);
        })?;
        self.scan_verified(META_CF, verifier, |_, _, _| {})
    }
}

#[cfg(feature = "testing")]
impl tidemark_disk::testing::StorageHooks for RocksDbStorage {
    fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db
            .put_cf_opt(self.cf(DATA_CF)?, key, stored, &opts)
            .map_err(rocks_err)
    }

    /// Flushes, then compacts the `data` column family down to the bottom level
    /// ([`RocksDbDiagnostics::compact_to_bottom`](crate::RocksDbDiagnostics::compact_to_bottom)): `flush` only syncs the WAL, so without this older
    /// versions would still sit in the memtable beside newer ones.
    fn settle(&self) -> Result<()> {
        self.compact_to_bottom()
    }
}

/// The error of a read of `key`. A `Corruption` status is damage RocksDB found in what it read
/// for the key (a block whose checksum does not match, a table file that does not parse), so it
/// is [`Error::Corrupt`] naming the key, like an entry that does not decode; any other status
/// (an I/O error, a busy or shut-down database) is the engine failing, [`Error::Backend`].
fn read_err(key: &[u8], e: rocksdb::Error) -> Error {
    if e.kind() == ErrorKind::Corruption {
        Error::corrupt(key, format!("RocksDB read: {e}"))
    } else {
        rocks_err(e)
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
