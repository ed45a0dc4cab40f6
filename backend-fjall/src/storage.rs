//! [`FjallStorage`]: the storage primitives of the fjall backend under the shared
//! [`DiskEngine`](tidemark_disk::DiskEngine).
//!
//! A bucket is one keyspace of the database its directory's parent shares
//! ([`crate::database`]): `<name>.data` maps each key to its tagged value (values and
//! tombstones alike, so the compaction filter sees both; a tombstone is never a fjall delete; a
//! key starting with byte `0xff` is stored with one more in front, so the flush marker below can
//! be one byte). Its watermark, applied end, format version and covered runs are rows of the
//! database's shared metadata keyspace under `<name>`, a NUL byte (no directory name holds one)
//! and [`MetaKey::bytes`] or the row's name. The bucket directory holds the Tidemark marker, the
//! high-water record and [`KEYSPACE_RECORD`], which names the keyspace.
//!
//! **Why the filter runs only inside `reclaim`, and the flush marker.** At open, fjall replays
//! every journal entry of a keyspace whose sequence number is above the highest one among the
//! keyspace's table files. A compaction filter that removes the newest flushed entries lowers
//! that highest number, so a reopen would replay the removed writes from the journal: reclaimed
//! entries would come back. So the filter removes nothing in fjall's own background compactions
//! (it is armed only for a reclaim's major compaction), and every reclaim starts by writing the
//! bucket's *flush marker* (a row under a key no bucket key is stored as,
//! [`crate::database::FLUSH_MARKER_KEY`], which the filter never removes) and flushing it with
//! everything before it: the table files then always hold a sequence number at least as new as
//! every entry the compaction removes, and nothing reclaimed is replayed.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fjall::config::CompressionPolicy;
use fjall::{
    CompressionType, Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode,
};
use tidemark_disk::budget::BucketLease;
use tidemark_disk::compaction_policy::{FilterCounters, ThresholdSupplier};
use tidemark_disk::layout::{FileStart, write_file_atomically};
use tidemark_disk::meta::encode_u64;
use tidemark_disk::watermark_threshold::{WatermarkThreshold, watermark_supplier};
use tidemark_disk::{
    BackendContext, CommitRequest, LiveEntries, MetaKey, ReadStored, ReclaimRequest, ReclaimWork,
    Storage, StorageInit,
};
use tidemark_engine_api::Verifier;
use tidemark_engine_api::covered::MetaRow;
use tidemark_engine_api::{Error, ReclaimCost, Result};

use crate::compaction_filter::TagThresholdFilterFactory;
use crate::context::FjallContext;
use crate::database::{
    DATA_SUFFIX, DatabaseLease, FLUSH_MARKER_KEY, SHARED_DIR, bucket_key, is_flush_marker,
    stored_key,
};
use crate::error::{BACKEND, fjall_err, is_damage, read_err};
use crate::group_commit::Writes;

/// The file in the bucket directory naming the bucket's keyspace in the shared database.
pub const KEYSPACE_RECORD: &str = "fjall-keyspace";

/// How long a flush may wait for fjall's workers before it fails.
const FLUSH_DEADLINE: Duration = Duration::from_secs(300);

/// Longest bucket directory name: the keyspace names add a suffix (and, rarely, a counter), and
/// fjall refuses names over 255 bytes.
const MAX_DIR_NAME: usize = 200;

/// One bucket's keyspace, its metadata rows and what its compaction filter shares with the
/// engine.
pub struct FjallStorage {
    // Declared before `database` so the keyspace handles are released before the lease, whose
    // drop may close the shared database.
    data: Keyspace,
    /// The database's shared metadata keyspace.
    meta: Keyspace,
    name: String,
    /// `name` and a NUL byte: the start of every metadata row of this bucket.
    meta_prefix: Vec<u8>,
    dir: PathBuf,
    context: FjallContext,
    filter_threshold: Arc<WatermarkThreshold>,
    filter_counters: Arc<FilterCounters>,
    /// Whether the filter removes anything: only while a reclaim's compaction runs.
    filter_armed: Arc<AtomicBool>,
    /// The factory this bucket routes its data keyspace's compactions to.
    filter_factory: Arc<TagThresholdFilterFactory>,
    database: DatabaseLease,
    /// This bucket's place in the context's budget, given back after the keyspaces are released.
    _lease: BucketLease,
}

impl std::fmt::Debug for FjallStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStorage")
            .field("dir", &self.dir)
            .field("keyspace", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for FjallStorage {
    fn drop(&mut self) {
        // From now on, compactions of the keyspace keep everything: the watermark they would
        // read is gone with the engine.
        self.database
            .unroute(&data_name(&self.name), &self.filter_factory);
    }
}

impl FjallStorage {
    /// The context this bucket shares resources with.
    pub fn context(&self) -> &FjallContext {
        &self.context
    }

    /// The shared database's directory.
    pub fn database_path(&self) -> Result<&Path> {
        self.database.path()
    }

    /// The bucket's keyspace name (its keyspace is `<name>.data`, its metadata rows are under
    /// `<name>` in the database's shared metadata keyspace).
    pub fn keyspace_name(&self) -> &str {
        &self.name
    }

    /// The counters of every compaction filter of `data` since open.
    pub fn filter_counters(&self) -> &FilterCounters {
        &self.filter_counters
    }

    /// Flushes the memtables of the bucket's keyspace and of the shared metadata keyspace into
    /// table files (no filtering: fjall filters only in compactions), and waits until no sealed
    /// memtable of either is left: the ones a reopen replays from the journal are sealed too, and
    /// a compaction never sees them.
    pub(crate) fn flush_memtables(&self) -> Result<()> {
        flush_keyspaces(self.database.db()?, &[&self.data, &self.meta]).map_err(|e| {
            Error::backend(
                BACKEND,
                format!("flushing the bucket {}: {e}", self.dir.display()),
            )
        })
    }

    /// Writes the flush marker and flushes it, with everything written before, into table files
    /// (see the module docs): from then on the newest sequence number among the table files is
    /// at least that of every entry a compaction of them may remove, so a reopen replays none of
    /// what a reclaim removed. Only `data` is flushed: the metadata holds nothing a filter
    /// removes, and each flush stalls every writer of the shared database while fjall's flush worker syncs
    /// the journal under its writer lock, and the keyspace's readers and writers while the new
    /// table's version files are synced under its version lock.
    fn write_flush_marker(&self) -> Result<()> {
        let mut batch = self.batch()?;
        batch.insert(&self.data, FLUSH_MARKER_KEY, &[][..]);
        batch.commit().map_err(fjall_err)?;
        flush_keyspaces(self.database.db()?, &[&self.data]).map_err(|e| {
            Error::backend(
                BACKEND,
                format!("flushing the bucket {}: {e}", self.dir.display()),
            )
        })
    }

    /// Bytes of the bucket's memtable: its writes sit in the shared journal until flushed.
    fn memtable_bytes(&self) -> u64 {
        use fjall::AbstractTree as _;
        self.data.tree.active_memtable().size()
    }

    /// Flushes, then compacts the whole `data` keyspace into its last level. The filter removes
    /// nothing here unless a reclaim armed it. The caller serialises it with reclaims.
    pub(crate) fn compact_to_bottom(&self) -> Result<()> {
        self.flush_memtables()?;
        self.database
            .compacting(|| self.data.major_compact().map_err(fjall_err))
    }

    /// Bytes of the table files of the bucket's keyspace, and of its writes not yet flushed from
    /// the shared journal (measured as its memtable's size; the rest of the journal is other
    /// buckets'). Its metadata rows, a few hundred bytes in the shared metadata keyspace, are
    /// not counted.
    fn keyspace_bytes(&self) -> u64 {
        self.data.disk_space().saturating_add(self.memtable_bytes())
    }

    /// The key of this bucket's metadata row `name`.
    fn meta_key(&self, name: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.meta_prefix.len() + name.len());
        key.extend_from_slice(&self.meta_prefix);
        key.extend_from_slice(name);
        key
    }

    /// The writes of `rows` (the last write of each row only: [`superseded`]).
    fn write_rows(&self, writes: &mut Writes, rows: &[MetaRow]) {
        let superseded = superseded(rows.iter().map(|row| row.name.as_bytes()));
        for (row, _) in rows.iter().zip(superseded).filter(|(_, later)| !later) {
            let key = self.meta_key(row.name.as_bytes());
            match &row.value {
                Some(value) => writes.insert(&self.meta, key, value.as_slice()),
                None => writes.remove(&self.meta, key),
            }
        }
    }

    /// Commits `writes`: a batch of its own, or through the database's group commit.
    fn write(&self, writes: Writes) -> Result<()> {
        match writes {
            Writes::Alone(batch) => batch.commit().map_err(fjall_err),
            Writes::Grouped(ops) => self.database.commit_synced(ops),
        }
    }

    fn batch(&self) -> Result<OwnedWriteBatch> {
        Ok(self.database.db()?.batch())
    }

    /// Iterates `rows` (of the bucket's keyspace or its metadata rows), calling `visit` per row.
    /// Damage fjall reports (a block whose checksum does not match, or that does not decode) is
    /// a finding, reported with the last key read before it; any other error ends the check.
    fn scan_verified(
        rows: fjall::Iter,
        what: &str,
        verifier: &mut Verifier,
        mut visit: impl FnMut(&mut Verifier, &[u8], &[u8]),
    ) -> Result<()> {
        let mut last_key: Option<Vec<u8>> = None;
        for guard in rows {
            match guard.into_inner() {
                Ok((key, value)) => {
                    visit(verifier, &key, &value);
                    last_key = Some(key.to_vec());
                }
                Err(e) if is_damage(&e) => {
                    verifier.engine_check_failed(last_key.as_deref(), format!("{what}: {e}"));
                    return Ok(());
                }
                Err(e) => return Err(fjall_err(e)),
            }
        }
        Ok(())
    }

    /// The work of one reclaim, with its threshold fixed in the filter: the flush marker and a
    /// flush, then the armed compaction of `data` into its last level. The counts are the filter
    /// counters' change meanwhile; the filter removes nothing outside an armed window, and a
    /// background compaction that runs inside it removes only what this reclaim would, so they
    /// are this reclaim's (an unreadable entry two compactions meet counts twice). Everything
    /// below the threshold is physically gone when it returns.
    fn reclaim_compaction(&self) -> Result<ReclaimWork> {
        let counters_before = self.filter_counters.snapshot();
        let bytes_before = self.keyspace_bytes();
        // The marker first, flushed with everything before it: every entry the compaction can
        // remove is older than the marker, which it keeps.
        self.write_flush_marker()?;
        self.database.compacting(|| {
            let _armed = Armed::new(&self.filter_armed);
            self.data.major_compact().map_err(fjall_err)
        })?;
        let delta = self.filter_counters.snapshot().since(&counters_before);
        Ok(delta.reclaim_work(&self.dir, bytes_before, self.keyspace_bytes(), None))
    }
}

impl Storage for FjallStorage {
    const BACKEND: &'static str = BACKEND;
    /// A major compaction of the bucket rewrites its live data.
    const RECLAIM_COST: ReclaimCost = ReclaimCost::Rewrite;
    type Context = FjallContext;

    /// Opens the bucket's keyspace in the shared database of `init.dir`'s parent, creating it
    /// when the directory has no [`KEYSPACE_RECORD`] and `init.options.open_mode` creates
    /// ([`Error::NoStore`] when it does not; [`Error::Damaged`] when the record exists but its
    /// keyspace does not). The filter reads `init.watermark`.
    ///
    /// fjall has no read-only open: a read-only engine opens the shared database normally (its
    /// recovery may write) and never writes through it.
    fn open(context: &FjallContext, init: StorageInit<'_>, lease: BucketLease) -> Result<Self> {
        let dir = init.dir;
        let record_path = dir.join(KEYSPACE_RECORD);
        init.require_engine_file(&record_path, "fjall keyspace record", FileStart::Header)?;
        let recorded = read_record(dir, &record_path)?;
        let settings = context.settings();
        let databases = context.database_settings();
        let memtable = settings.memtable_bytes.max(64 << 10);
        let open_keyspace = |database: &DatabaseLease, name: &str| -> Result<Keyspace> {
            database.keyspace(&data_name(name), || data_keyspace_options(memtable))
        };
        let home = std::fs::canonicalize(dir)?;
        let (database, record, data) = match recorded {
            Some(record) if record.home != home => {
                return Err(Error::backend(
                    BACKEND,
                    format!(
                        "the fjall bucket directory {} was created as {}: a copied or moved \
                         fjall bucket directory is not a store of its own (its data stays in the \
                         shared database {} of the original's parent)",
                        dir.display(),
                        record.home.display(),
                        SHARED_DIR
                    ),
                ));
            }
            Some(record) => {
                if !DatabaseLease::exists(dir, record.database)? {
                    return Err(Error::Damaged {
                        path: dir.to_path_buf(),
                        reason: format!(
                            "its {KEYSPACE_RECORD} names a keyspace in the shared fjall database \
                             ../{SHARED_DIR}/{}, which is missing",
                            record.database
                        ),
                    });
                }
                let database = DatabaseLease::open(dir, record.database, databases)?;
                let keyspace = data_name(&record.name);
                if !database.keyspace_exists(&keyspace)? {
                    return Err(Error::Damaged {
                        path: dir.to_path_buf(),
                        reason: format!(
                            "its keyspace {keyspace:?} is missing from the shared fjall \
                             database {}",
                            database.path()?.display()
                        ),
                    });
                }
                let data = open_keyspace(&database, &record.name)?;
                (database, record, data)
            }
            None => {
                if home.to_str().is_none_or(|h| h.contains('\n')) {
                    return Err(Error::invalid(format!(
                        "a fjall bucket directory's path must be UTF-8 without line breaks: {}",
                        home.display()
                    )));
                }
                let (database, number, (name, data)) =
                    DatabaseLease::create_bucket(dir, databases, |database| {
                        let name = free_name(database, dir)?;
                        let data = open_keyspace(database, &name)?;
                        Ok((name, data))
                    })?;
                let record = KeyspaceRecord {
                    name,
                    database: number,
                    home: home.clone(),
                };
                // The keyspace exists durably before the record names it: a crash in between
                // leaves an unnamed keyspace (space, never a wrong store).
                database
                    .db()?
                    .persist(PersistMode::SyncAll)
                    .map_err(fjall_err)?;
                write_file_atomically(dir, KEYSPACE_RECORD, record.body().as_bytes())?;
                (database, record, data)
            }
        };
        let name = record.name;
        let meta = database.meta()?.clone();
        let filter_threshold = Arc::new(WatermarkThreshold::new(
            init.watermark,
            init.options.retention_distance,
        ));
        let filter_counters = Arc::new(FilterCounters::default());
        let filter_armed = Arc::new(AtomicBool::new(false));
        let threshold = watermark_supplier(Arc::clone(&filter_threshold));
        let armed = Arc::clone(&filter_armed);
        let supplier: ThresholdSupplier =
            Arc::new(move || armed.load(Ordering::Acquire).then(|| threshold()).flatten());
        let filter_factory = Arc::new(
            TagThresholdFilterFactory::new(0, supplier).with_counters(Arc::clone(&filter_counters)),
        );
        database.route(&data_name(&name), Arc::clone(&filter_factory))?;
        Ok(FjallStorage {
            data,
            meta,
            meta_prefix: meta_prefix(&name),
            name,
            dir: dir.to_path_buf(),
            context: context.clone(),
            filter_threshold,
            filter_counters,
            filter_armed,
            filter_factory,
            database,
            _lease: lease,
        })
    }

    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>> {
        self.meta
            .get(self.meta_key(key.bytes()))
            .map(|value| value.map(|v| v.to_vec()))
            .map_err(|e| read_err(key.bytes(), e))
    }

    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()> {
        // The synced journal holds every earlier write of every bucket of the database.
        let mut batch = self.batch()?.durability(Some(PersistMode::SyncAll));
        batch.insert(
            &self.meta,
            self.meta_key(key.bytes()),
            encode_u64(value).as_slice(),
        );
        batch.commit().map_err(fjall_err)
    }

    fn holds_data(&self) -> Result<bool> {
        for guard in self.data.iter() {
            if !is_flush_marker(&guard.key().map_err(fjall_err)?) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Deletes the bucket's metadata rows and its keyspace from its shared database (the space
    /// goes as fjall drops the keyspace's table files); refused while the bucket is open in this
    /// process.
    fn remove(context: &FjallContext, dir: &Path) -> Result<()> {
        let Some(record) = read_record(dir, &dir.join(KEYSPACE_RECORD))? else {
            // Never given a keyspace: it has nothing in a shared database.
            return Ok(());
        };
        if record.home != std::fs::canonicalize(dir)? {
            return Err(Error::backend(
                BACKEND,
                format!(
                    "the fjall bucket directory {} was created as {}: removing a copy would \
                     remove the original's rows",
                    dir.display(),
                    record.home.display()
                ),
            ));
        }
        if !DatabaseLease::exists(dir, record.database)? {
            return Ok(());
        }
        let _lease = context.admit(dir)?;
        let database = DatabaseLease::open(dir, record.database, context.database_settings())?;
        database.remove_bucket(&data_name(&record.name), &meta_prefix(&record.name))
    }

    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let mut rows = Vec::new();
        for guard in self.meta.prefix(self.meta_key(prefix.as_bytes())) {
            let (key, value) = guard.into_inner().map_err(fjall_err)?;
            let name = key.get(self.meta_prefix.len()..).unwrap_or_default();
            let name = String::from_utf8(name.to_vec())
                .map_err(|_| Error::corrupt(name, "metadata row name is not UTF-8".to_owned()))?;
            rows.push((name, value.to_vec()));
        }
        Ok(rows)
    }

    fn write_meta_rows(&self, rows: &[MetaRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut writes = Writes::Alone(self.batch()?);
        self.write_rows(&mut writes, rows);
        self.write(writes)
    }

    /// A synced commit joins its database's group commit (DESIGN § fjall): one batch and one
    /// journal sync with the other buckets' synced commits arriving at the same time.
    fn commit(&self, commit: CommitRequest<'_>) -> Result<()> {
        let mut writes = if commit.sync {
            Writes::Grouped(Vec::with_capacity(
                commit.writes.len() + commit.rows.len() + 1,
            ))
        } else {
            Writes::Alone(self.batch()?)
        };
        // A key the batch writes twice goes in once, its last write ([`superseded`]).
        let superseded = superseded(commit.writes.iter().map(|record| record.key()));
        for (record, _) in commit
            .writes
            .iter()
            .zip(superseded)
            .filter(|(_, later)| !later)
        {
            writes.insert(
                &self.data,
                stored_key(record.key()).as_ref(),
                record.encoded_value(),
            );
        }
        // The applied end rides in the same batch, one journal entry: a crash never separates
        // them.
        writes.insert(
            &self.meta,
            self.meta_key(MetaKey::AppliedEnd.bytes()),
            encode_u64(commit.applied_end).as_slice(),
        );
        self.write_rows(&mut writes, commit.rows);
        self.write(writes)
    }

    fn get<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<T> {
        let value = self
            .data
            .get(stored_key(key))
            .map_err(|e| read_err(key, e))?;
        read(value.as_deref())
    }

    /// Always inline, as redb's: a point read is the memtables, then at most one data block per
    /// level whose bloom filter admits the key (the filters and indexes of the upper levels are
    /// pinned in memory, blocks come from the shared cache when the bucket is warm), so it
    /// never blocks for long. Answering only from the active memtable sent nearly every bucket
    /// lookup to a blocking thread, ten times the cost of the read itself.
    fn get_inline<T>(&self, key: &[u8], read: impl ReadStored<T>) -> Result<Option<T>> {
        self.get(key, read).map(Some)
    }

    /// A reclaim flushes, then major-compacts the whole `data` keyspace into its last level,
    /// during which the filter removes what the threshold covers (a removal is a fjall tombstone,
    /// evicted at the last level). A purge (`reclaim_below`) puts its threshold in the filter
    /// for the duration of the call; a plain reclaim's threshold is the filter's own `W − D`.
    fn reclaim(&self, request: ReclaimRequest<'_>) -> Result<ReclaimWork> {
        // Every reclaim, not only a purge, applies the threshold fixed when it started: every
        // entry below it was committed before the flush marker, so no entry a compaction removes
        // while the filter is armed is newer than the marker. `W − D` read by each compaction
        // could cover an entry written after the marker, which a reopen would replay.
        let _fixed = self.filter_threshold.purge_below(request.threshold);
        self.reclaim_compaction()
    }

    fn bytes_on_disk(&self) -> Result<u64> {
        Ok(self.keyspace_bytes())
    }

    /// Nothing to wait for: a reclaim's major compaction gives the space back before it returns
    /// (installing its output marks the compacted table files deleted; fjall removes each once
    /// no reader holds it).
    fn wait_for_background_work(&self) -> Result<()> {
        Ok(())
    }

    /// Always 0: the reclaim's compaction is the rebuild, and it is no separate one (as
    /// RocksDB's, § Engine contract / stats).
    fn space_rebuilds(&self) -> u64 {
        0
    }

    fn live_entries(&self) -> Result<LiveEntries> {
        // The flush marker, once written, is not an entry.
        let marker = self
            .data
            .contains_key(FLUSH_MARKER_KEY)
            .map_err(fjall_err)?;
        Ok(LiveEntries {
            count: (self.data.approximate_len() as u64).saturating_sub(u64::from(marker)),
            exact: false,
        })
    }

    fn flush(&self) -> Result<()> {
        self.database
            .db()?
            .persist(PersistMode::SyncAll)
            .map_err(fjall_err)
    }

    /// Flushes the bucket's memtable into table files and syncs the journal, so a cleanly closed
    /// bucket reopens from its table files. Its metadata rows stay in the shared metadata
    /// keyspace's memtable, durable in the synced journal: flushing it at every close would
    /// stall every writer of the database once per bucket; the database flushes it when its
    /// last bucket closes.
    fn close(&self) -> Result<()> {
        flush_keyspaces(self.database.db()?, &[&self.data]).map_err(|e| {
            Error::backend(
                BACKEND,
                format!("flushing the bucket {}: {e}", self.dir.display()),
            )
        })?;
        self.flush()
    }

    /// Every row of `data` must decode below the applied end; the bucket's keyspace and its
    /// metadata rows are read in full, every block loaded checked against its checksum (fjall
    /// keeps no offset index to compare).
    fn verify(&self, verifier: &mut Verifier) -> Result<()> {
        verifier.engine_check(
            "fjall block checksums (every block of the bucket's keyspace and metadata rows)",
        );
        Self::scan_verified(self.data.iter(), "data", verifier, |v, key, stored| {
            if let Some(key) = bucket_key(key) {
                v.data_row(key, stored);
            }
        })?;
        Self::scan_verified(
            self.meta.prefix(&self.meta_prefix),
            "meta",
            verifier,
            |_, _, _| {},
        )
    }
}

#[cfg(feature = "testing")]
impl tidemark_disk::testing::StorageHooks for FjallStorage {
    fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        let mut batch = self.batch()?.durability(Some(PersistMode::SyncAll));
        batch.insert(&self.data, stored_key(key).as_ref(), stored);
        batch.commit().map_err(fjall_err)
    }

    /// Flushes, then compacts `data` into its last level ([`FjallDiagnostics::compact_to_bottom`](crate::FjallDiagnostics::compact_to_bottom)).
    fn settle(&self) -> Result<()> {
        self.compact_to_bottom()
    }
}

/// How a bucket's `data` keyspace is created: `memtable_bytes` memtables, and LZ4 for data
/// and index blocks at every level (as RocksDB's buckets).
pub fn data_keyspace_options(memtable_bytes: u64) -> KeyspaceCreateOptions {
    let lz4 = || CompressionPolicy::all(CompressionType::Lz4);
    KeyspaceCreateOptions::default()
        .max_memtable_size(memtable_bytes)
        .data_block_compression_policy(lz4())
        .index_block_compression_policy(lz4())
}

fn data_name(name: &str) -> String {
    format!("{name}{DATA_SUFFIX}")
}

/// The start of every metadata row of the bucket `name`: its name and a NUL byte, which no
/// name holds (it comes from a directory name), so no bucket's rows start another's.
fn meta_prefix(name: &str) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(name.len() + 1);
    prefix.extend_from_slice(name.as_bytes());
    prefix.push(0);
    prefix
}

/// Flushes the memtables of `keyspaces` (of the database `db`) into table files and waits until
/// none of them has a sealed memtable left (a reopen's replayed ones included, which fjall's own
/// `rotate_memtable_and_wait` does not wait for): the buckets' flush, and a raw fjall
/// baseline's, so both wait alike.
///
/// Fails as soon as `db` is poisoned: a worker whose flush or compaction failed (a full disk,
/// say) stops, and nothing flushes the sealed memtables any more, so waiting out the deadline
/// would only hold up the caller (every close of a bucket of that database, one after another).
pub fn flush_keyspaces(db: &Database, keyspaces: &[&Keyspace]) -> Result<()> {
    failed_database(db)?;
    for keyspace in keyspaces {
        keyspace.rotate_memtable().map_err(fjall_err)?;
    }
    let deadline = Instant::now() + FLUSH_DEADLINE;
    let mut pause = Duration::from_micros(50);
    let mut next_check = Instant::now() + POISON_CHECK_EVERY;
    while keyspaces.iter().any(|k| k.sealed_memtable_count() > 0) {
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::backend(
                BACKEND,
                format!(
                    "fjall's workers did not flush within {} s",
                    FLUSH_DEADLINE.as_secs()
                ),
            ));
        }
        if now >= next_check {
            failed_database(db)?;
            next_check = now + POISON_CHECK_EVERY;
        }
        // fjall's workers flush and offer no completion signal. A small bucket's flush takes
        // about a millisecond, so the wait backs off only to 1 ms: a longer pause would be most
        // of a small reclaim's time.
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
    Ok(())
}

/// How often a flush waiting for fjall's workers checks that the database has not failed: the
/// check takes the journal's lock, so not at every pause.
const POISON_CHECK_EVERY: Duration = Duration::from_millis(20);

/// An error when `db` is poisoned. fjall offers no other public test of the flag than
/// `persist`, which checks it first; `Buffer` only hands the journal's buffered bytes to the
/// operating system, which a flush's own journal sync does anyway. A write error there (a full
/// disk) poisons the database, as the next write would have.
fn failed_database(db: &Database) -> Result<()> {
    db.persist(PersistMode::Buffer).map_err(|e| {
        Error::backend(
            BACKEND,
            format!(
                "the shared fjall database failed, and its workers no longer flush (a flush or \
                 compaction failed: see fjall's log; a full disk, say): {e}"
            ),
        )
    })
}

/// For each of a write batch's `keys` (in batch order), whether the batch writes the same key
/// again later: only the last write of a key may go into a fjall batch.
///
/// fjall gives every entry of a batch the batch's one sequence number, and its memtable holds one
/// entry per key and sequence number: a second write of a key in the same batch replaces the
/// first by unlinking it, then linking the new entry (lsm-tree's memtable is a crossbeam
/// `SkipMap`, whose `insert` replaces that way). A read in between finds neither and answers
/// the key's previous version, older than one it may already have returned, or nothing at all.
/// The last write is what the batch leaves anyway; the rest keep their batch order.
fn superseded<'a>(
    keys: impl DoubleEndedIterator<Item = &'a [u8]> + ExactSizeIterator,
) -> Vec<bool> {
    if keys.len() < 2 {
        return vec![false; keys.len()];
    }
    let mut later = HashSet::with_capacity(keys.len());
    let mut superseded: Vec<bool> = keys.rev().map(|key| !later.insert(key)).collect();
    superseded.reverse();
    superseded
}

/// What [`KEYSPACE_RECORD`] holds: the bucket's keyspace name and its shared database.
#[derive(Debug)]
struct KeyspaceRecord {
    name: String,
    database: u32,
    /// The bucket directory the record was written in (absolute, links resolved): a copy or a
    /// move of the directory names the same keyspaces, so it is refused rather than aliased.
    home: PathBuf,
}

impl KeyspaceRecord {
    fn body(&self) -> String {
        format!(
            "keyspace={}\ndatabase={}\nhome={}\n",
            self.name,
            self.database,
            self.home.display()
        )
    }
}

/// The record at `record_path`; `None` when there is none.
fn read_record(dir: &Path, record_path: &Path) -> Result<Option<KeyspaceRecord>> {
    let text = match std::fs::read(record_path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::Io(e)),
    };
    let parsed = std::str::from_utf8(&text).ok().and_then(|t| {
        let (name, rest) = t.strip_prefix("keyspace=")?.split_once('\n')?;
        let (number, rest) = rest.strip_prefix("database=")?.split_once('\n')?;
        let home = rest.strip_prefix("home=")?.strip_suffix('\n')?;
        let database = number.parse::<u32>().ok()?;
        (!name.is_empty() && !home.is_empty()).then(|| KeyspaceRecord {
            name: name.to_owned(),
            database,
            home: PathBuf::from(home),
        })
    });
    match parsed {
        Some(record) => Ok(Some(record)),
        None => Err(Error::Damaged {
            path: dir.to_path_buf(),
            reason: format!("its {KEYSPACE_RECORD} is unreadable ({} bytes)", text.len()),
        }),
    }
}

/// A keyspace name for the new bucket at `dir`: its directory name, or, when a keyspace or
/// metadata rows of that name are left in the shared database (a bucket directory deleted
/// without its keyspace, or one renamed), the name with the first free `~<n>` suffix. Leftovers
/// are never reused: they may belong to a bucket that was moved.
fn free_name(database: &DatabaseLease, dir: &Path) -> Result<String> {
    let base = dir
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty() && n.len() <= MAX_DIR_NAME)
        .ok_or_else(|| {
            Error::invalid(format!(
                "a fjall bucket directory name must be UTF-8 of 1 to {MAX_DIR_NAME} bytes: {}",
                dir.display()
            ))
        })?;
    let meta = database.meta()?;
    let taken = |name: &str| -> Result<bool> {
        Ok(database.keyspace_exists(&data_name(name))?
            || meta.prefix(meta_prefix(name)).next().is_some())
    };
    if !taken(base)? {
        return Ok(base.to_owned());
    }
    for n in 1..u32::MAX {
        let name = format!("{base}~{n}");
        if !taken(&name)? {
            return Ok(name);
        }
    }
    Err(Error::ResourceLimit {
        path: dir.to_path_buf(),
        message: "every keyspace name for this directory is taken".to_owned(),
    })
}

/// Arms a bucket's filter for the guard's life (also on an error path).
struct Armed<'a>(&'a AtomicBool);

impl<'a> Armed<'a> {
    fn new(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::Release);
        Armed(flag)
    }
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::superseded;

    #[test]
    fn only_the_last_write_of_a_key_is_kept() {
        let keys: [&[u8]; 5] = [b"a", b"b", b"a", b"c", b"a"];
        assert_eq!(
            superseded(keys.into_iter()),
            [true, false, true, false, false]
        );
        let one: [&[u8]; 1] = [b"a"];
        assert_eq!(superseded(one.into_iter()), [false]);
        assert!(superseded(std::iter::empty()).is_empty());
    }
}
