//! [`RocksDbStorage`]: the storage primitives of the RocksDB backend under the shared
//! [`DiskEngine`](tidemark_disk::DiskEngine).
//!
//! A bucket's rows live in the RocksDB instance its directory's parent shares
//! ([`crate::instance`]), under the bucket's key prefix: column family `data` maps each prefixed
//! key to its tagged value (values and tombstones alike, so the compaction filter sees both; a
//! tombstone is never a RocksDB delete), and column family `meta` holds the watermark, the
//! applied end, the format version and the covered runs under the prefixed [`MetaKey::bytes`].
//! The bucket directory holds its marker, its high-water record and [`BUCKET_RECORD`], which
//! names its prefix.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{ErrorKind, ReadOptions, ReadTier, WriteOptions, properties};
use tidemark_disk::BackendContext;
use tidemark_disk::budget::BucketLease;
use tidemark_disk::layout::FileStart;
use tidemark_disk::layout::shared::{SharedRecord, shared_dir_of};
use tidemark_disk::meta::encode_u64;
use tidemark_disk::{
    CommitRequest, LiveEntries, MetaKey, ReadStored, ReclaimRequest, ReclaimWork, Storage,
    StorageInit,
};
use tidemark_engine_api::Verifier;
use tidemark_engine_api::covered::MetaRow;
use tidemark_engine_api::{Error, ReclaimCost, Result};

use crate::compact;
use crate::compaction_filter::TagThresholdFilterFactory;
use crate::context::RocksDbContext;
use crate::instance::{BucketPrefix, DATA_CF, InstanceLease, InstanceMode, META_CF, SHARED_DIR};
use crate::rocks_err;
use crate::suppliers::{WatermarkThreshold, watermark_threshold_filter_factory};
use tidemark_disk::compaction_policy::FilterCounters;

/// Backend name written into the directory marker.
pub use crate::error::BACKEND;

/// The file of a bucket directory naming the bucket's prefix in its shared instance.
pub const BUCKET_RECORD: &str = "rocksdb-bucket";

/// One bucket of a shared RocksDB instance and what its compaction filter shares with the
/// engine.
pub struct RocksDbStorage {
    prefix: BucketPrefix,
    /// This bucket's filter, routed to while it is open (unrouted on drop, before the instance
    /// lease goes).
    filter: Arc<TagThresholdFilterFactory>,
    instance: InstanceLease,
    instance_path: PathBuf,
    context: RocksDbContext,
    /// What this bucket's filter applies: `W − D`, or a purge threshold while `reclaim_below`
    /// runs.
    filter_threshold: Arc<WatermarkThreshold>,
    filter_counters: Arc<FilterCounters>,
    /// This bucket's place in the context's budget, given back after the instance lease.
    _lease: BucketLease,
}

impl std::fmt::Debug for RocksDbStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbStorage")
            .field("instance_path", &self.instance_path)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Drop for RocksDbStorage {
    fn drop(&mut self) {
        self.instance.unroute(self.prefix, &self.filter);
    }
}

impl RocksDbStorage {
    /// The context this bucket shares resources with.
    pub fn context(&self) -> &RocksDbContext {
        &self.context
    }

    /// The directory of the RocksDB instance this bucket shares (`<parent>/.tidemark-rocksdb`).
    pub fn instance_path(&self) -> &Path {
        &self.instance_path
    }

    /// The bucket's key prefix in its instance.
    pub fn prefix(&self) -> BucketPrefix {
        self.prefix
    }

    /// The counters of this bucket's compaction filter since open.
    pub fn filter_counters(&self) -> &FilterCounters {
        &self.filter_counters
    }

    /// Flushes the instance's memtables into table files (no compaction, so no filtering:
    /// RocksDB filters only in compactions).
    pub(crate) fn flush_memtables(&self) -> Result<()> {
        self.instance.flush_memtables()
    }

    /// Flushes, then compacts this bucket's key range of `data` down to the bottom level, so
    /// everything written so far sits as deep as it goes. The compaction filter runs as in any
    /// compaction, so entries covered by `W − D` go without being counted in any reclaim's
    /// report. Call it through
    /// [`DiskEngine::with_reclaimer`](tidemark_disk::DiskEngine::with_reclaimer), which
    /// serialises it with reclaims (tests use it to place older versions of a key below newer
    /// ones).
    pub(crate) fn compact_to_bottom(&self) -> Result<()> {
        self.flush_memtables()?;
        self.compact_range()
    }

    /// Compacts the bucket's key range, widened over small bottom-level neighbours
    /// ([`compact::widened_over_small_neighbours`]) so that the buckets of an instance do not
    /// leave a table file each.
    fn compact_range(&self) -> Result<()> {
        let (start, end) = self.range();
        let db = self.instance.db()?;
        let (wide_start, wide_end) = compact::widened_over_small_neighbours(
            &compact::table_files(db, DATA_CF)?,
            start.clone(),
            end.clone(),
        );
        let widened = (&wide_start, &wide_end) != (&start, &end);
        compact::compact_to_bottom(
            db,
            self.instance.cf(DATA_CF)?,
            DATA_CF,
            Some((&wide_start, &wide_end)),
            widened,
        )
    }

    /// The bucket's key range: its prefix, and the first key past it (exclusive).
    fn range(&self) -> (Vec<u8>, Vec<u8>) {
        (self.prefix.bytes().to_vec(), self.prefix.end())
    }

    /// Table files per level of the instance's `data` column family (index = level): every
    /// bucket's.
    pub(crate) fn data_files_per_level(&self) -> Result<Vec<u64>> {
        let db = self.instance.db()?;
        let cf = self.instance.cf(DATA_CF)?;
        (0..7)
            .map(|level| {
                Ok(db
                    .property_int_value_cf(cf, properties::num_files_at_level(level))
                    .map_err(rocks_err)?
                    .unwrap_or(0))
            })
            .collect()
    }

    /// Table-file bytes of this bucket's key range of `column` (RocksDB's estimate from the
    /// files' indexes; memtables are not counted).
    fn range_bytes(&self, column: &str) -> Result<u64> {
        let (start, end) = self.range();
        let sizes = self.instance.db()?.get_approximate_sizes_cf(
            self.instance.cf(column)?,
            &[rocksdb::Range::new(&start, &end)],
        );
        Ok(sizes.first().copied().unwrap_or(0))
    }

    /// Whether any of this bucket's `data` rows is still in the memtables.
    fn holds_memtable_rows(&self) -> Result<bool> {
        let mut opts = ReadOptions::default();
        opts.set_read_tier(ReadTier::Memtable);
        opts.fill_cache(false);
        let mut iter = self.bucket_iter(DATA_CF, opts)?;
        iter.seek_to_first();
        iter.status().map_err(rocks_err)?;
        Ok(iter.valid())
    }

    /// Key and value bytes of this bucket's `data` rows still in the memtables (a memtable-only
    /// iterator over its range: at most the memtables' size to read).
    fn memtable_bytes(&self) -> Result<u64> {
        let mut opts = ReadOptions::default();
        opts.set_read_tier(ReadTier::Memtable);
        opts.fill_cache(false);
        let mut iter = self.bucket_iter(DATA_CF, opts)?;
        iter.seek_to_first();
        let mut bytes = 0u64;
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            bytes = bytes.saturating_add((key.len() + value.len()) as u64);
            iter.next();
        }
        iter.status().map_err(rocks_err)?;
        Ok(bytes)
    }

    /// Table-file bytes of this bucket's `data` rows (RocksDB's estimate).
    pub(crate) fn live_sst_bytes(&self) -> Result<u64> {
        self.range_bytes(DATA_CF)
    }

    fn add_meta_rows(&self, write: &mut rocksdb::WriteBatch, rows: &[MetaRow]) -> Result<()> {
        let meta = self.instance.cf(META_CF)?;
        for row in rows {
            let key = self.prefix.key(row.name.as_bytes());
            match &row.value {
                Some(value) => write.put_cf(meta, key, value),
                None => write.delete_cf(meta, key),
            }
        }
        Ok(())
    }

    /// An iterator over this bucket's rows of `column` only.
    fn bucket_iter(
        &self,
        column: &str,
        mut opts: ReadOptions,
    ) -> Result<rocksdb::DBRawIterator<'_>> {
        let (start, end) = self.range();
        opts.set_iterate_lower_bound(start);
        opts.set_iterate_upper_bound(end);
        Ok(self
            .instance
            .db()?
            .raw_iterator_cf_opt(self.instance.cf(column)?, opts))
    }

    /// Iterates this bucket's rows of column family `name` with every block's checksum verified
    /// (and the block cache left alone), calling `visit` per row with the key without its
    /// prefix. A checksum mismatch (RocksDB reports any corruption it meets this way) is a
    /// finding, reported with the last key read before it; any other error ends the check.
    fn scan_verified(
        &self,
        name: &str,
        verifier: &mut Verifier,
        mut visit: impl FnMut(&mut Verifier, &[u8], &[u8]),
    ) -> Result<()> {
        let mut opts = ReadOptions::default();
        opts.set_verify_checksums(true);
        opts.fill_cache(false);
        let mut iter = self.bucket_iter(name, opts)?;
        iter.seek_to_first();
        let mut last_key: Option<Vec<u8>> = None;
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            let key = key.get(crate::instance::PREFIX_LEN..).unwrap_or_default();
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
    /// compact this bucket's key range to the bottom level.
    ///
    /// The counts are this bucket's filter counters' change over the flush and the compaction,
    /// the baseline taken right before the flush. The flush belongs in the window: it can bring
    /// L0 to RocksDB's compaction trigger, and the automatic compaction it starts then removes
    /// covered entries (often before `compact_range` even begins); those removals are this
    /// reclaim's work, and a baseline taken after the flush would miss some or all of them.
    ///
    /// The counts are exact when no background compaction meets this bucket's keys meanwhile,
    /// the usual case for a quiet bucket; otherwise they are approximate (a corrupt entry that a
    /// background and the manual compaction both meet is counted twice). Nothing covered is
    /// missed either way: when the call returns, everything of this bucket below `threshold` is
    /// physically gone. The compaction may rewrite table files this bucket shares with its
    /// neighbours in key order; their entries are filtered by their own buckets' thresholds and
    /// counted in their own counters.
    fn reclaim_compaction(&self) -> Result<ReclaimWork> {
        let counters_before = self.filter_counters.snapshot();
        // A compaction filters only table files, so the bucket's rows in the memtables go there
        // first. Rows written after this check are newer than the reclaim's start, so none is
        // covered; and an idle bucket, whose rows were all flushed long ago, flushes nothing:
        // its reclaim does not cut the instance's memtable short into a small table file.
        if self.holds_memtable_rows()? {
            self.instance.flush_data()?;
        }
        let bytes_before = self.live_sst_bytes()?;
        let db = self.instance.db()?;
        let (start, end) = self.range();
        let overlapping = |files: Vec<rocksdb::LiveFile>| -> Vec<rocksdb::LiveFile> {
            files
                .into_iter()
                .filter(|f| compact::overlaps(f, &start, &end))
                .collect()
        };
        let files_before: HashSet<String> = overlapping(compact::table_files(db, DATA_CF)?)
            .into_iter()
            .map(|f| f.name)
            .collect();
        self.compact_range()?;
        let delta = self.filter_counters.snapshot().since(&counters_before);
        let bytes_after = self.live_sst_bytes()?;
        // What the compaction wrote, from RocksDB's own file metadata: every live table file of
        // this bucket's range that did not exist once the flush was done is one of its outputs
        // (or, rarely, of a background compaction in the same window). A file it shares with a
        // neighbour counts whole.
        let bytes_rewritten = overlapping(compact::table_files(db, DATA_CF)?)
            .into_iter()
            .filter(|f| !files_before.contains(&f.name))
            .map(|f| f.size as u64)
            .sum();
        Ok(delta.reclaim_work(
            &self.instance_path,
            bytes_before,
            bytes_after,
            Some(bytes_rewritten),
        ))
    }
}

/// The prefix `record` (of the bucket directory `dir`) names.
fn recorded_prefix(dir: &Path, record: &SharedRecord) -> Result<BucketPrefix> {
    record
        .name
        .parse::<u32>()
        .ok()
        .filter(|_| record.instance == 0)
        .map(BucketPrefix)
        .ok_or_else(|| Error::Damaged {
            path: dir.to_path_buf(),
            reason: format!("its {BUCKET_RECORD} names no bucket prefix"),
        })
}

/// Opens (or creates) the bucket at `dir`'s place in its shared instance: the instance and the
/// bucket's prefix.
fn open_place(
    context: &RocksDbContext,
    init: &StorageInit<'_>,
) -> Result<(InstanceLease, BucketPrefix)> {
    let dir = init.dir;
    let mode = init.options.open_mode;
    let shared = shared_dir_of(dir, SHARED_DIR, BACKEND)?;
    let Some(record) = SharedRecord::read(dir, BUCKET_RECORD)? else {
        // No record: `require_engine_file` let this open through, so its mode creates.
        let instance = InstanceLease::open(context, shared, InstanceMode::Create)?;
        let prefix = instance.take_prefix()?;
        // The prefix is durably taken before the record names it: a crash in between leaves a
        // prefix nobody uses, never a bucket without its rows.
        SharedRecord::new(dir, prefix.0.to_string(), 0)?.write(dir, BUCKET_RECORD)?;
        return Ok((instance, prefix));
    };
    record.check_home(dir, BACKEND, SHARED_DIR)?;
    let damaged = |reason: String| Error::Damaged {
        path: dir.to_path_buf(),
        reason,
    };
    let prefix = recorded_prefix(dir, &record)?;
    if !shared.join("CURRENT").is_file() {
        return Err(damaged(format!(
            "its {BUCKET_RECORD} names bucket {} of the shared RocksDB instance ../{SHARED_DIR}, \
             which is missing",
            prefix.0
        )));
    }
    let instance_mode = if mode.writes() {
        InstanceMode::Existing
    } else {
        InstanceMode::ReadOnly
    };
    let instance = InstanceLease::open(context, shared, instance_mode)?;
    if !instance.was_taken(prefix)? {
        return Err(damaged(format!(
            "its {BUCKET_RECORD} names bucket {} of the shared RocksDB instance {}, which never \
             had it (the instance was replaced)",
            prefix.0,
            instance.path()?.display()
        )));
    }
    Ok((instance, prefix))
}

impl Storage for RocksDbStorage {
    const BACKEND: &'static str = BACKEND;
    /// A compaction of the bucket's key range rewrites its live data.
    const RECLAIM_COST: ReclaimCost = ReclaimCost::Rewrite;
    type Context = RocksDbContext;

    /// Opens the bucket at `init.dir` in the instance its parent directory shares (opening the
    /// instance with `context`'s resources when it is not open yet); its filter reads
    /// `init.watermark`. A new bucket takes the next prefix of the instance (created when
    /// missing) if `init.options.open_mode` creates; otherwise its record must exist
    /// ([`Error::NoStore`] when it does not), and
    /// [`OpenMode::ReadOnly`](tidemark_engine_api::OpenMode::ReadOnly) opens an instance this
    /// process does not have open with RocksDB's read-only open, which writes nothing.
    fn open(context: &RocksDbContext, init: StorageInit<'_>, lease: BucketLease) -> Result<Self> {
        init.require_engine_file(
            &init.dir.join(BUCKET_RECORD),
            "RocksDB bucket record",
            FileStart::Header,
        )?;
        let (instance, prefix) = open_place(context, &init)?;
        let filter_threshold = Arc::new(WatermarkThreshold::new(
            init.watermark,
            init.options.retention_distance,
        ));
        let filter_counters = Arc::new(FilterCounters::default());
        let filter = Arc::new(
            watermark_threshold_filter_factory(Arc::clone(&filter_threshold))
                .with_counters(Arc::clone(&filter_counters)),
        );
        // A read-only open neither writes nor compacts; routing it would also refuse a read-only
        // open beside a writer of the same bucket.
        if init.options.open_mode.writes() {
            instance.route(prefix, Arc::clone(&filter))?;
        }
        let instance_path = instance.path()?.to_path_buf();
        Ok(RocksDbStorage {
            prefix,
            filter,
            instance,
            instance_path,
            context: context.clone(),
            filter_threshold,
            filter_counters,
            _lease: lease,
        })
    }

    /// Deletes the bucket's rows from its shared instance (one synced write of two range
    /// deletions), drops the table files that hold only its rows, and compacts its key range so
    /// the space is given back. Refused while the bucket is open in this process.
    fn remove(context: &RocksDbContext, dir: &Path) -> Result<()> {
        let Some(record) = SharedRecord::read(dir, BUCKET_RECORD)? else {
            // Never given a prefix: it has no rows.
            return Ok(());
        };
        record.check_home(dir, BACKEND, SHARED_DIR)?;
        let prefix = recorded_prefix(dir, &record)?;
        let shared = shared_dir_of(dir, SHARED_DIR, BACKEND)?;
        if !shared.join("CURRENT").is_file() {
            // The instance is gone, and the bucket's rows with it.
            return Ok(());
        }
        let _lease = context.admit(dir)?;
        let instance = InstanceLease::open(context, shared, InstanceMode::Existing)?;
        instance.remove_rows(prefix)
    }

    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>> {
        self.instance
            .db()?
            .get_cf(self.instance.cf(META_CF)?, self.prefix.key(key.bytes()))
            .map_err(|e| read_err(key.bytes(), e))
    }

    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()> {
        // A synced write also syncs the log holding every earlier write.
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.instance
            .db()?
            .put_cf_opt(
                self.instance.cf(META_CF)?,
                self.prefix.key(key.bytes()),
                encode_u64(value),
                &opts,
            )
            .map_err(rocks_err)
    }

    fn holds_data(&self) -> Result<bool> {
        let mut iter = self.bucket_iter(DATA_CF, ReadOptions::default())?;
        iter.seek_to_first();
        iter.status().map_err(rocks_err)?;
        Ok(iter.valid())
    }

    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let mut iter = self.bucket_iter(META_CF, ReadOptions::default())?;
        let start = self.prefix.key(prefix.as_bytes());
        iter.seek(&start);
        let mut rows = Vec::new();
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            if !key.starts_with(&start) {
                break;
            }
            let name = key.get(crate::instance::PREFIX_LEN..).unwrap_or_default();
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
        self.instance.db()?.write(write).map_err(rocks_err)
    }

    /// One write batch of the bucket's prefixed rows. Synced commits of many buckets of the
    /// instance at once join one RocksDB write group and share one sync of the log.
    fn commit(&self, commit: CommitRequest<'_>) -> Result<()> {
        let data = self.instance.cf(DATA_CF)?;
        let mut write = rocksdb::WriteBatch::default();
        for record in commit.writes {
            write.put_cf(data, self.prefix.key(record.key()), record.encoded_value());
        }
        // The applied end rides in the same atomic write: a crash never separates them.
        write.put_cf(
            self.instance.cf(META_CF)?,
            self.prefix.key(MetaKey::AppliedEnd.bytes()),
            encode_u64(commit.applied_end),
        );
        self.add_meta_rows(&mut write, commit.rows)?;
        let mut opts = WriteOptions::default();
        opts.set_sync(commit.sync);
        self.instance
            .db()?
            .write_opt(write, &opts)
            .map_err(rocks_err)
    }

    /// A read restricted to the memtables and the block cache (`ReadTier::BlockCache`):
    /// RocksDB answers `Incomplete` instead of reading a table file, and then the read goes to a
    /// blocking thread.
    fn get_inline<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<Option<T>> {
        let mut opts = ReadOptions::default();
        opts.set_read_tier(ReadTier::BlockCache);
        let stored = self.instance.db()?.get_pinned_cf_opt(
            self.instance.cf(DATA_CF)?,
            self.prefix.key(key),
            &opts,
        );
        match stored {
            Ok(value) => read(value.as_deref()).map(Some),
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => Ok(None),
            Err(e) => Err(read_err(key, e)),
        }
    }

    fn get<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<T> {
        let value = self
            .instance
            .db()?
            .get_pinned_cf(self.instance.cf(DATA_CF)?, self.prefix.key(key))
            .map_err(|e| read_err(key, e))?;
        read(value.as_deref())
    }

    /// A reclaim is a flush and a manual compaction of the bucket's key range of `data` down to
    /// and including the bottom level, during which the filter removes what the threshold
    /// covers. A purge (`reclaim_below`) puts its threshold in the bucket's filter for the
    /// duration of the call (see [`WatermarkThreshold::purge_below`]); a plain reclaim's
    /// threshold is the filter's own `W − D`.
    fn reclaim(&self, request: ReclaimRequest<'_>) -> Result<ReclaimWork> {
        // Held for the whole compaction; dropping it restores `W − D`.
        let _purge = request
            .purge
            .then(|| self.filter_threshold.purge_below(request.threshold));
        self.reclaim_compaction()
    }

    /// The bucket's rows on disk: the table-file bytes of its key ranges of both column
    /// families (RocksDB's estimate from the files' indexes), plus the bytes of its rows still
    /// in the memtables, which are on disk in the shared log until a flush. The rest of the
    /// instance's files (manifest, info log, options) are shared and counted in no bucket.
    fn bytes_on_disk(&self) -> Result<u64> {
        Ok(self.range_bytes(DATA_CF)? + self.range_bytes(META_CF)? + self.memtable_bytes()?)
    }

    /// RocksDB's estimate of the keys of the instance's `data`, in the share the bucket's
    /// table bytes are of all of them (an even share of the open buckets' while nothing is
    /// flushed).
    fn live_entries(&self) -> Result<LiveEntries> {
        let db = self.instance.db()?;
        let cf = self.instance.cf(DATA_CF)?;
        let property = |name| -> Result<u64> {
            Ok(db
                .property_int_value_cf(cf, name)
                .map_err(rocks_err)?
                .unwrap_or(0))
        };
        let keys = property(properties::ESTIMATE_NUM_KEYS)?;
        let all = property(properties::LIVE_SST_FILES_SIZE)?;
        let count = if all == 0 {
            keys / (self.context.open_buckets().max(1) as u64)
        } else {
            let share = self.live_sst_bytes()?.min(all);
            u64::try_from(u128::from(keys) * u128::from(share) / u128::from(all)).unwrap_or(keys)
        };
        Ok(LiveEntries {
            count,
            exact: false,
        })
    }

    fn flush(&self) -> Result<()> {
        self.instance.db()?.flush_wal(true).map_err(rocks_err)
    }

    /// Syncs the log alongside the writers, so the synced write of a watermark change has only
    /// its own record to sync.
    fn prepare_durable(&self) -> Result<()> {
        self.flush()
    }

    /// Syncs the log; the instance's last bucket also flushes the memtables into table files,
    /// so a cleanly closed instance reopens from its table files and manifest alone (damage to
    /// the log after a clean close loses nothing).
    fn close(&self) -> Result<()> {
        if self.instance.is_last() {
            self.flush_memtables()?;
        }
        self.flush()
    }

    /// Every row of the bucket's `data` range must decode below the applied end; the bucket's
    /// ranges of both column families are read in full with RocksDB's block checksums verified
    /// (RocksDB keeps no offset index to compare).
    fn verify(&self, verifier: &mut Verifier) -> Result<()> {
        verifier.engine_check("rocksdb block checksums (every block of the bucket's rows)");
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
        self.instance
            .db()?
            .put_cf_opt(
                self.instance.cf(DATA_CF)?,
                self.prefix.key(key),
                stored,
                &opts,
            )
            .map_err(rocks_err)
    }

    /// Flushes, then compacts the bucket's range of `data` down to the bottom level
    /// ([`RocksDbDiagnostics::compact_to_bottom`](crate::RocksDbDiagnostics::compact_to_bottom)): `flush` only syncs the log, so without this older
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
