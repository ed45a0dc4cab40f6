//! The RocksDB instance the buckets of one directory share, and the routing of its compaction
//! filter to the bucket each key belongs to.
//!
//! A RocksDB instance per bucket gives each bucket its own log (and fsync), manifest, memtables,
//! table cache and a few dozen descriptors: a thousand idle buckets cannot open under the usual
//! limit of 1,024 descriptors. Instead the buckets whose directories sit in the same parent
//! directory keep their rows in one instance under `<parent>/`[`SHARED_DIR`], each under a
//! key prefix of its own ([`BucketPrefix`]) in the instance's two column families. The instance
//! is opened when the first of its buckets opens and closed when the last of them closes; the
//! registry is process-wide, not per context, since RocksDB locks its directory.
//!
//! What the sharing gives: one log for every bucket, so synced writes of many buckets join one
//! write group and share one fsync; one memtable per column family; one table cache bounded by
//! `max_open_files`; background work that does not grow with the buckets. What it costs: a
//! bucket directory is no longer the whole store (its rows are in the instance beside it, so it
//! cannot be copied or moved on its own), and a reclaim's compaction of one bucket's key range
//! rewrites the table files it shares with its neighbours.
//!
//! The `data` column family's compaction filter is the instance's ([`RoutedFilterFactory`]): for
//! each key it finds the bucket by its prefix and applies that bucket's threshold, read once per
//! bucket per compaction; a key whose bucket is not open is kept.

use std::collections::HashMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};
use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DB, DBRecoveryMode, FlushOptions, WriteOptions,
};
use tidemark_disk::BackendContext;
use tidemark_engine_api::sync::lock;
use tidemark_engine_api::{Error, Result};

use crate::compaction_filter::{TagThresholdFilter, TagThresholdFilterFactory};
use crate::context::RocksDbContext;
use crate::error::{BACKEND, rocks_err};

/// Name of the directory of the shared instance, beside the bucket directories it serves.
pub const SHARED_DIR: &str = ".tidemark-rocksdb";
/// Column family of the tagged values, each under its bucket's prefix.
pub const DATA_CF: &str = "data";
/// Column family of each bucket's watermark, applied end, format version and covered runs
/// under its prefix, and of the instance's own rows under [`INSTANCE_PREFIX`].
pub const META_CF: &str = "meta";

/// Bytes of a bucket's key prefix.
pub const PREFIX_LEN: usize = 4;
/// The prefix of the instance's own rows in `meta`; never a bucket's.
pub const INSTANCE_PREFIX: u32 = u32::MAX;
/// The instance's row holding the next unused bucket prefix.
const NEXT_PREFIX_ROW: &[u8] = b"next-bucket-prefix";

/// A bucket's key prefix in its shared instance: the big-endian bytes of a number the instance
/// gave it when it was created, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketPrefix(pub u32);

impl BucketPrefix {
    /// The prefix bytes.
    pub fn bytes(self) -> [u8; PREFIX_LEN] {
        self.0.to_be_bytes()
    }

    /// `key` under this prefix.
    pub fn key(self, key: &[u8]) -> Vec<u8> {
        let mut prefixed = Vec::with_capacity(PREFIX_LEN + key.len());
        prefixed.extend_from_slice(&self.bytes());
        prefixed.extend_from_slice(key);
        prefixed
    }

    /// The first key past every key under this prefix (exclusive upper bound of its range).
    pub fn end(self) -> Vec<u8> {
        match self.0.checked_add(1) {
            Some(next) => next.to_be_bytes().to_vec(),
            // Only the instance's own prefix has no successor; its range ends past every key.
            None => vec![0xff; PREFIX_LEN + 1],
        }
    }

    /// The prefix of a stored key and the key without it; `None` for a key shorter than a
    /// prefix (none is ever written).
    pub fn split(stored: &[u8]) -> Option<(BucketPrefix, &[u8])> {
        let (prefix, key) = stored.split_at_checked(PREFIX_LEN)?;
        let prefix = <[u8; PREFIX_LEN]>::try_from(prefix).ok()?;
        Some((BucketPrefix(u32::from_be_bytes(prefix)), key))
    }
}

/// The stored next unused prefix (8 big-endian bytes).
fn decode_next(bytes: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(bytes).ok().map(u64::from_be_bytes)
}

type Routes = RwLock<HashMap<u32, Arc<TagThresholdFilterFactory>>>;

/// One open shared instance and the filter factory of each open bucket.
struct SharedInstance {
    // Declared first: closed before the routes its filter factory shares.
    db: DB,
    path: PathBuf,
    routes: Arc<Routes>,
    writable: bool,
    /// Held while a bucket takes a prefix, so two new buckets never take the same one.
    creating: Mutex<()>,
}

/// Open writable shared instances by directory. A dead entry is removed under this lock by the
/// last holder before the instance closes ([`InstanceLease`]'s drop), so an open never meets an
/// instance still closing.
static OPEN: Mutex<Option<HashMap<PathBuf, Weak<SharedInstance>>>> = Mutex::new(None);

/// What the registry's lock is called in [`Error::Poisoned`].
const REGISTRY: &str = "shared RocksDB instance registry";

/// A bucket's hold on its shared instance; the instance closes when the last lease is dropped.
pub(crate) struct InstanceLease {
    shared: Option<Arc<SharedInstance>>,
}

impl std::fmt::Debug for InstanceLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceLease")
            .field("path", &self.shared.as_ref().map(|s| &s.path))
            .finish_non_exhaustive()
    }
}

/// How a bucket wants its instance opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InstanceMode {
    /// Writable, created when missing.
    Create,
    /// Writable; it must exist.
    Existing,
    /// Read-only (RocksDB's read-only open writes nothing); it must exist. An instance this
    /// process has open writable is joined instead.
    ReadOnly,
}

impl InstanceLease {
    /// Opens (or joins) the shared instance at `path` with `context`'s options. A new
    /// instance takes the options of the context that opens it first; later buckets join it as
    /// it is.
    pub(crate) fn open(
        context: &RocksDbContext,
        path: PathBuf,
        mode: InstanceMode,
    ) -> Result<Self> {
        let mut open = lock(&OPEN, REGISTRY)?;
        let map = open.get_or_insert_with(HashMap::new);
        if let Some(shared) = map.get(&path).and_then(Weak::upgrade) {
            return Ok(InstanceLease {
                shared: Some(shared),
            });
        }
        let shared = Arc::new(SharedInstance::open(context, path.clone(), mode)?);
        if shared.writable {
            map.insert(path, Arc::downgrade(&shared));
        }
        Ok(InstanceLease {
            shared: Some(shared),
        })
    }

    fn shared(&self) -> Result<&SharedInstance> {
        self.shared
            .as_deref()
            .ok_or_else(|| Error::backend(BACKEND, "the shared RocksDB instance is closed"))
    }

    /// The instance's database.
    pub(crate) fn db(&self) -> Result<&DB> {
        Ok(&self.shared()?.db)
    }

    /// The instance's directory.
    pub(crate) fn path(&self) -> Result<&Path> {
        Ok(&self.shared()?.path)
    }

    /// The column family `name`.
    pub(crate) fn cf(&self, name: &str) -> Result<&ColumnFamily> {
        self.db()?
            .cf_handle(name)
            .ok_or_else(|| Error::backend(BACKEND, format!("column family {name:?} is missing")))
    }

    /// Whether this lease is the instance's last: closing its bucket closes the instance.
    pub(crate) fn is_last(&self) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|s| Arc::strong_count(s) == 1)
    }

    /// Takes the next unused bucket prefix, durably: a crash after this leaves a prefix no
    /// bucket uses (nothing is stored under it), never one two buckets use.
    pub(crate) fn take_prefix(&self) -> Result<BucketPrefix> {
        let shared = self.shared()?;
        let _alone = lock(&shared.creating, "RocksDB bucket creation")?;
        let meta = self.cf(META_CF)?;
        let row = BucketPrefix(INSTANCE_PREFIX).key(NEXT_PREFIX_ROW);
        let next = match shared.db.get_cf(meta, &row).map_err(rocks_err)? {
            None => 0,
            Some(bytes) => decode_next(&bytes).ok_or_else(|| Error::Damaged {
                path: shared.path.clone(),
                reason: "its next bucket prefix is unreadable".to_owned(),
            })?,
        };
        let prefix = u32::try_from(next)
            .ok()
            .filter(|p| *p != INSTANCE_PREFIX)
            .ok_or_else(|| Error::ResourceLimit {
                path: shared.path.clone(),
                message: "every bucket prefix of this shared RocksDB instance is taken".to_owned(),
            })?;
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        shared
            .db
            .put_cf_opt(meta, &row, tidemark_disk::meta::encode_u64(next + 1), &opts)
            .map_err(rocks_err)?;
        Ok(BucketPrefix(prefix))
    }

    /// Whether `prefix` was ever given to a bucket of this instance.
    pub(crate) fn was_taken(&self, prefix: BucketPrefix) -> Result<bool> {
        let row = BucketPrefix(INSTANCE_PREFIX).key(NEXT_PREFIX_ROW);
        let next = self
            .db()?
            .get_cf(self.cf(META_CF)?, &row)
            .map_err(rocks_err)?
            .and_then(|bytes| decode_next(&bytes))
            .unwrap_or(0);
        Ok(u64::from(prefix.0) < next)
    }

    /// Routes compactions of `prefix`'s keys to `factory` until [`InstanceLease::unroute`].
    /// Refused while another open engine routes it: two engines on one bucket (or on a copy of
    /// its directory) would write over each other.
    pub(crate) fn route(
        &self,
        prefix: BucketPrefix,
        factory: Arc<TagThresholdFilterFactory>,
    ) -> Result<()> {
        let shared = self.shared()?;
        let mut routes = shared
            .routes
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if routes.contains_key(&prefix.0) {
            return Err(Error::backend(
                BACKEND,
                format!(
                    "bucket {} of the shared RocksDB instance {} is already open in this process",
                    prefix.0,
                    shared.path.display()
                ),
            ));
        }
        routes.insert(prefix.0, factory);
        Ok(())
    }

    /// Stops routing compactions of `prefix` to `factory` (they keep its keys from now on).
    pub(crate) fn unroute(&self, prefix: BucketPrefix, factory: &Arc<TagThresholdFilterFactory>) {
        if let Ok(shared) = self.shared() {
            let mut routes = shared
                .routes
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if routes
                .get(&prefix.0)
                .is_some_and(|f| Arc::ptr_eq(f, factory))
            {
                routes.remove(&prefix.0);
            }
        }
    }

    /// Deletes every row of `prefix` (a closed bucket's) and gives their space back; refused
    /// while a bucket of that prefix is open in this process.
    pub(crate) fn remove_rows(&self, prefix: BucketPrefix) -> Result<()> {
        let shared = self.shared()?;
        let routes = shared.routes.read().unwrap_or_else(PoisonError::into_inner);
        if routes.contains_key(&prefix.0) {
            return Err(Error::backend(
                BACKEND,
                format!(
                    "bucket {} of the shared RocksDB instance {} is open in this process: close \
                     it before removing it",
                    prefix.0,
                    shared.path.display()
                ),
            ));
        }
        // Held until the rows are gone, so the bucket is not reopened meanwhile.
        let (start, end) = (prefix.bytes().to_vec(), prefix.end());
        let mut write = rocksdb::WriteBatch::default();
        for name in [DATA_CF, META_CF] {
            write.delete_range_cf(self.cf(name)?, &start, &end);
        }
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        shared.db.write_opt(write, &opts).map_err(rocks_err)?;
        drop(routes);
        for name in [DATA_CF, META_CF] {
            let cf = self.cf(name)?;
            shared
                .db
                .delete_file_in_range_cf(cf, &start, &end)
                .map_err(rocks_err)?;
            crate::compact::compact_to_bottom(&shared.db, cf, name, Some((&start, &end)), false)?;
        }
        Ok(())
    }

    /// Flushes both column families' memtables into table files.
    pub(crate) fn flush_memtables(&self) -> Result<()> {
        self.shared()?.flush_memtables()
    }

    /// Flushes the `data` column family's memtable into a table file.
    pub(crate) fn flush_data(&self) -> Result<()> {
        let mut opts = FlushOptions::default();
        opts.set_wait(true);
        self.db()?
            .flush_cf_opt(self.cf(DATA_CF)?, &opts)
            .map_err(rocks_err)
    }
}

impl Drop for InstanceLease {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        // A drop cannot fail, so a poisoned registry is taken over: every change to the map is
        // one insert or remove, so it is consistent whatever panicked while it was held.
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        // The last lease closes the instance while holding the registry, so nobody reopens it
        // before RocksDB has released its lock.
        if Arc::strong_count(&shared) == 1
            && let Some(map) = open.as_mut()
        {
            map.remove(&shared.path);
        }
        drop(shared);
    }
}

impl SharedInstance {
    fn open(context: &RocksDbContext, path: PathBuf, mode: InstanceMode) -> Result<Self> {
        let routes: Arc<Routes> = Arc::default();
        let mut db_opts = context.db_options();
        let creates = mode == InstanceMode::Create;
        db_opts.create_if_missing(creates);
        db_opts.create_missing_column_families(creates);
        // A damaged log must not be replayed up to the damage and served as the whole store:
        // a checksum failure anywhere in the log fails the open (only an incomplete record at
        // the very end, a write a crash tore, is dropped), and the sizes of closed logs are
        // recorded in the manifest, so a missing or shortened one fails it too. What this does
        // not see (a log cut at a record boundary, or zeroed) the high-water records bound.
        db_opts.set_wal_recovery_mode(DBRecoveryMode::TolerateCorruptedTailRecords);
        db_opts.set_track_and_verify_wals_in_manifest(true);
        let mut data_opts = context.db_options();
        data_opts.set_periodic_compaction_seconds(context.settings().periodic_compaction_secs);
        data_opts.set_compaction_filter_factory(RoutedFilterFactory {
            routes: Arc::clone(&routes),
        });
        let mut meta_opts = context.db_options();
        meta_opts.set_write_buffer_size(256 << 10);
        let families = [
            ColumnFamilyDescriptor::new(DATA_CF, data_opts),
            ColumnFamilyDescriptor::new(META_CF, meta_opts),
        ];
        let writable = mode != InstanceMode::ReadOnly;
        let db = if writable {
            DB::open_cf_descriptors(&db_opts, &path, families)
        } else {
            // Replays the log into memory, never into files.
            DB::open_cf_descriptors_read_only(&db_opts, &path, families, false)
        }
        // RocksDB's recovery errors ("Corruption: checksum mismatch") do not always name the
        // database they came from.
        .map_err(|e| {
            Error::backend(
                BACKEND,
                format!(
                    "opening the shared RocksDB instance {}: {e}",
                    path.display()
                ),
            )
        })?;
        Ok(SharedInstance {
            db,
            path,
            routes,
            writable,
            creating: Mutex::new(()),
        })
    }

    fn flush_memtables(&self) -> Result<()> {
        let mut opts = FlushOptions::default();
        opts.set_wait(true);
        for name in [DATA_CF, META_CF] {
            let cf = self.db.cf_handle(name).ok_or_else(|| {
                Error::backend(BACKEND, format!("column family {name:?} is missing"))
            })?;
            self.db.flush_cf_opt(cf, &opts).map_err(rocks_err)?;
        }
        Ok(())
    }
}

impl Drop for SharedInstance {
    /// Flushes the memtables and the log, so a closed instance reopens from its table files and
    /// manifest alone (the last bucket's close has normally done it already; this covers an
    /// instance whose buckets' opens failed after it was opened).
    fn drop(&mut self) {
        if !self.writable {
            return;
        }
        if let Err(e) = self
            .flush_memtables()
            .and_then(|()| self.db.flush_wal(true).map_err(rocks_err))
        {
            tracing::warn!(path = %self.path.display(), error = %e, "closing a shared RocksDB instance");
        }
    }
}

/// The filter factory of the shared `data` column family: each compaction's filter routes
/// every key to its bucket's filter.
struct RoutedFilterFactory {
    routes: Arc<Routes>,
}

impl CompactionFilterFactory for RoutedFilterFactory {
    type Filter = RoutedFilter;

    fn create(&mut self, context: CompactionFilterContext) -> RoutedFilter {
        RoutedFilter {
            routes: Arc::clone(&self.routes),
            manual: context.is_manual_compaction,
            current: None,
        }
    }

    fn name(&self) -> &CStr {
        c"tidemark.RoutedFilterFactory"
    }
}

/// One compaction's filter: the filter of the bucket whose keys it is meeting, started (its
/// threshold read) when the compaction meets that bucket's first key. A compaction meets keys in
/// order, so each bucket's keys come in one run and one bucket's filter is held at a time.
struct RoutedFilter {
    routes: Arc<Routes>,
    manual: bool,
    /// The bucket of the last key met and its filter (`None`: the bucket is not open, so its keys
    /// are kept).
    current: Option<(BucketPrefix, Option<TagThresholdFilter>)>,
}

impl RoutedFilter {
    fn filter_of(&mut self, prefix: BucketPrefix) -> Option<&TagThresholdFilter> {
        if self.current.as_ref().is_none_or(|(p, _)| *p != prefix) {
            let factory = self
                .routes
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&prefix.0)
                .cloned();
            let filter = factory.map(|factory| {
                factory.counters().record_compaction(self.manual);
                factory.start()
            });
            self.current = Some((prefix, filter));
        }
        self.current.as_ref().and_then(|(_, f)| f.as_ref())
    }
}

impl CompactionFilter for RoutedFilter {
    fn filter(&mut self, _level: u32, key: &[u8], value: &[u8]) -> Decision {
        let Some((prefix, user_key)) = BucketPrefix::split(key) else {
            return Decision::Keep;
        };
        // The filter decodes the value against the user's key, which the prefix is not part of.
        match self.filter_of(prefix) {
            Some(filter) if filter.removes(user_key, value) => Decision::Remove,
            _ => Decision::Keep,
        }
    }

    fn name(&self) -> &CStr {
        c"tidemark.RoutedFilter"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_order_buckets_and_bound_their_ranges() {
        let a = BucketPrefix(1);
        assert_eq!(a.key(b"k"), [0, 0, 0, 1, b'k']);
        assert_eq!(a.end(), [0, 0, 0, 2]);
        assert!(a.key(&[0xff; 300]) < a.end());
        assert!(BucketPrefix(0x0000_00ff).end() == [0, 0, 1, 0]);
        assert_eq!(BucketPrefix::split(&a.key(b"xy")), Some((a, &b"xy"[..])));
        assert_eq!(BucketPrefix::split(b"abc"), None);
        assert!(BucketPrefix(INSTANCE_PREFIX).key(b"row") < BucketPrefix(INSTANCE_PREFIX).end());
    }
}
