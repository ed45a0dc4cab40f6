//! The fjall databases the buckets of one directory share, and the routing of their compaction
//! filters to the bucket each keyspace belongs to.
//!
//! fjall starts a worker pool per `Database` (at least one thread) and journals every keyspace
//! of a database in one journal. One database per bucket would put a thread per bucket in the
//! process; instead the buckets whose directories sit in the same parent directory share
//! databases under `<parent>/`[`SHARED_DIR`], numbered `0`, `1`, ..., each opened when the first
//! of its buckets opens and closed when the last of them closes. A bucket is one keyspace of its
//! database, `<name>`[`DATA_SUFFIX`]; the metadata rows of all buckets of a database live in one
//! keyspace, [`SHARED_META_KEYSPACE`], under the bucket's name (a keyspace costs memory and a
//! place in the recovery queue below, a metadata row almost nothing). The registry is
//! process-wide, not per context: fjall locks its directory, so two contexts must never open the
//! same database twice.
//!
//! A database holds at most [`MAX_BUCKETS_PER_DATABASE`] buckets: while it recovers, fjall
//! 3.1.13 (`Database::recover`) sends one flush or compaction request per keyspace that needs one
//! into its workers' channel of 1,000 with a blocking send, before it starts the workers that
//! drain it, so a database of more than 1,000 keyspaces that all need one would block its own
//! open. With the shared metadata keyspace, 999 buckets are 1,000 keyspaces: the channel holds a
//! request for every one of them.
//!
//! A keyspace's compaction filter is assigned when fjall opens the keyspace (at database
//! recovery, before its bucket is open), so every `data` keyspace gets a [`RoutedFilterFactory`]
//! that looks up, per compaction, the filter factory its bucket registered; a keyspace whose
//! bucket is not open keeps everything.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};

use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};
use fjall::{Config, Database, Keyspace, KeyspaceCreateOptions};
use tidemark_engine_api::sync::lock;
use tidemark_engine_api::{Error, Result};

use crate::compaction_filter::{TagThresholdFilter, TagThresholdFilterFactory};
use crate::error::{BACKEND, fjall_err};
use crate::group_commit::{GroupCommit, Op, fill};
use crate::options::FjallContextOptions;
use crate::storage::flush_keyspaces;

/// Name of the directory of the shared databases, beside the bucket directories they serve.
pub const SHARED_DIR: &str = ".tidemark-fjall";

/// The most keyspaces one shared database holds: fjall's recovery queues up to one request per
/// keyspace into a channel of 1,000 before its workers start (see the module docs).
pub const MAX_KEYSPACES_PER_DATABASE: usize = 1000;

/// The most buckets one shared database takes: one keyspace each, beside the shared metadata
/// keyspace. Keyspaces left over by deleted bucket directories take a bucket's place.
pub const MAX_BUCKETS_PER_DATABASE: usize = MAX_KEYSPACES_PER_DATABASE - 1;

/// Suffix of a bucket's data keyspace (its tagged values), after the bucket's keyspace name.
pub const DATA_SUFFIX: &str = ".data";

/// The keyspace of a shared database holding every bucket's metadata rows (watermark, applied
/// end, format version, covered runs), each under the bucket's name, a NUL byte and the row's
/// name. No bucket's keyspace has this name: theirs end in [`DATA_SUFFIX`].
pub const SHARED_META_KEYSPACE: &str = "tidemark.meta";

/// Memtable size of the shared metadata keyspace: its rows are small, and every flush of it
/// stalls the database's writers (a journal sync).
const META_MEMTABLE_BYTES: u64 = 4 << 20;

/// fjall's least journal budget (its builder panics below it); smaller settings count as it.
pub const MIN_JOURNAL_BUDGET: u64 = 64 << 20;
/// fjall's least table-file descriptor cache (its builder panics below it); smaller settings
/// count as it.
pub const MIN_CACHED_FILES: usize = 10;

/// Major compactions (reclaims) one shared database runs at once. A reclaim compacts on its
/// caller's thread, so without a limit every reclaiming thread would hold an output table file
/// open in the same database; the descriptors a database is admitted for count this many.
pub const RECLAIMS_PER_DATABASE: usize = 2;

type Routes = Mutex<HashMap<String, Arc<TagThresholdFilterFactory>>>;

/// One open shared database, its metadata keyspace and the filter factory of each open bucket's
/// data keyspace.
pub(crate) struct SharedDatabase {
    // Declared before `db`: the keyspace handle goes before the database closes.
    meta: Keyspace,
    db: Database,
    path: PathBuf,
    routes: Arc<Routes>,
    /// Held while a bucket checks for room, picks its keyspace name, creates its keyspace and
    /// routes it, so two new buckets never pick the same name nor overfill the database.
    creating: Mutex<()>,
    /// Reclaims compacting now (at most [`RECLAIMS_PER_DATABASE`]).
    compacting: Mutex<usize>,
    /// Signalled when a reclaim's compaction ends.
    compacted: Condvar,
    /// Where its buckets' synced commits gather into shared batches.
    group_commit: GroupCommit,
}

/// The figures every shared database of a context is opened with: the context's block cache
/// (one for all of them) and each database's share of the journal budget and of the descriptor
/// cache.
#[derive(Clone)]
pub(crate) struct DatabaseSettings {
    /// A fjall configuration holding the context's block cache, which every database the context
    /// opens takes.
    pub(crate) cache: Config,
    /// Worker threads of each database.
    pub(crate) worker_threads: usize,
    /// Journal budget of each database, bytes.
    pub(crate) journal_bytes: u64,
    /// Table files each database keeps open at most.
    pub(crate) cached_files: usize,
}

impl std::fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("cache_bytes", &self.cache.cache.capacity())
            .field("worker_threads", &self.worker_threads)
            .field("journal_bytes", &self.journal_bytes)
            .field("cached_files", &self.cached_files)
            .finish()
    }
}

impl DatabaseSettings {
    /// The settings of the databases a context of `settings` opens: its block cache, and the
    /// journal budget and descriptor cache split among the databases its `max_buckets` buckets
    /// of one directory fill (each at least fjall's least).
    pub(crate) fn new(settings: &FjallContextOptions) -> Self {
        let databases = databases_for(settings.max_buckets);
        DatabaseSettings {
            cache: Database::builder(Path::new(SHARED_DIR))
                .cache_size(settings.cache_bytes)
                .into_config(),
            worker_threads: settings.worker_threads.max(1),
            journal_bytes: (settings.journal_budget_bytes / databases as u64)
                .max(MIN_JOURNAL_BUDGET),
            cached_files: (settings.max_cached_files / databases).max(MIN_CACHED_FILES),
        }
    }
}

/// Shared databases `buckets` buckets of one directory fill (at least one).
pub(crate) fn databases_for(buckets: usize) -> usize {
    buckets.div_ceil(MAX_BUCKETS_PER_DATABASE).max(1)
}

impl std::fmt::Debug for SharedDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedDatabase")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Open shared databases by directory. A dead entry is removed under this lock by the last
/// holder before the database closes ([`DatabaseLease`]'s drop), so an open never meets a
/// database still closing.
static OPEN: Mutex<Option<HashMap<PathBuf, Weak<SharedDatabase>>>> = Mutex::new(None);

/// What the registry's lock is called in [`Error::Poisoned`].
const REGISTRY: &str = "shared fjall database registry";
/// What a database's filter routes' lock is called in [`Error::Poisoned`].
const ROUTES: &str = "fjall compaction filter routes";

/// A bucket's hold on its shared database; the database closes when the last lease is dropped.
#[derive(Debug)]
pub(crate) struct DatabaseLease {
    shared: Option<Arc<SharedDatabase>>,
}

impl DatabaseLease {
    /// Opens (or joins) the shared database `number` serving the bucket directory `bucket_dir`.
    pub(crate) fn open(
        bucket_dir: &Path,
        number: u32,
        settings: &DatabaseSettings,
    ) -> Result<Self> {
        Self::open_at(
            shared_dir_of(bucket_dir)?.join(number.to_string()),
            settings,
        )
    }

    /// Whether the shared database `number` of `bucket_dir` exists on disk.
    pub(crate) fn exists(bucket_dir: &Path, number: u32) -> Result<bool> {
        Ok(shared_dir_of(bucket_dir)?.join(number.to_string()).is_dir())
    }

    /// Creates a bucket in the first shared database of `bucket_dir` with room for one more
    /// ([`MAX_KEYSPACES_PER_DATABASE`], leftover keyspaces counted), creating the next database
    /// when all are full: `create` runs alone among the buckets being created in that database,
    /// with the room checked under the same lock. Returns the database, its number and what
    /// `create` returned.
    pub(crate) fn create_bucket<T>(
        bucket_dir: &Path,
        settings: &DatabaseSettings,
        mut create: impl FnMut(&DatabaseLease) -> Result<T>,
    ) -> Result<(Self, u32, T)> {
        let root = shared_dir_of(bucket_dir)?;
        for number in 0..u32::MAX {
            let lease = Self::open_at(root.join(number.to_string()), settings)?;
            let created = {
                let shared = lease.shared()?;
                let _alone = lock(&shared.creating, "fjall bucket creation")?;
                if shared.db.keyspace_count() < MAX_KEYSPACES_PER_DATABASE {
                    Some(create(&lease)?)
                } else {
                    None
                }
            };
            if let Some(created) = created {
                return Ok((lease, number, created));
            }
        }
        Err(Error::ResourceLimit {
            path: root,
            message: "every shared fjall database of this directory is full".to_owned(),
        })
    }

    fn open_at(path: PathBuf, settings: &DatabaseSettings) -> Result<Self> {
        let mut open = lock(&OPEN, REGISTRY)?;
        let map = open.get_or_insert_with(HashMap::new);
        if let Some(shared) = map.get(&path).and_then(Weak::upgrade) {
            return Ok(DatabaseLease {
                shared: Some(shared),
            });
        }
        let shared = Arc::new(SharedDatabase::open(path.clone(), settings)?);
        map.insert(path, Arc::downgrade(&shared));
        Ok(DatabaseLease {
            shared: Some(shared),
        })
    }

    fn shared(&self) -> Result<&SharedDatabase> {
        self.shared
            .as_deref()
            .ok_or_else(|| Error::backend(BACKEND, "the shared fjall database is closed"))
    }

    /// The database.
    pub(crate) fn db(&self) -> Result<&Database> {
        Ok(&self.shared()?.db)
    }

    /// The database's directory.
    pub(crate) fn path(&self) -> Result<&Path> {
        Ok(&self.shared()?.path)
    }

    /// The keyspace holding every bucket's metadata rows ([`SHARED_META_KEYSPACE`]).
    pub(crate) fn meta(&self) -> Result<&Keyspace> {
        Ok(&self.shared()?.meta)
    }

    /// Writes `ops` durably in one batch with the synced commits of the database's other
    /// buckets that arrive at the same time, one journal sync for all ([`crate::group_commit`]).
    pub(crate) fn commit_synced(&self, ops: Vec<Op>) -> Result<()> {
        let shared = self.shared()?;
        shared.group_commit.commit(ops, |ops| {
            let mut batch = shared
                .db
                .batch()
                .durability(Some(fjall::PersistMode::SyncAll));
            fill(&mut batch, ops);
            batch.commit().map_err(fjall_err)
        })
    }

    /// Runs `compact` once fewer than [`RECLAIMS_PER_DATABASE`] reclaims of this database
    /// compact.
    pub(crate) fn compacting<T>(&self, compact: impl FnOnce() -> Result<T>) -> Result<T> {
        let shared = self.shared()?;
        {
            let mut running = lock(&shared.compacting, "fjall reclaim permits")?;
            while *running >= RECLAIMS_PER_DATABASE {
                running = shared
                    .compacted
                    .wait(running)
                    .map_err(|_| Error::Poisoned {
                        what: "fjall reclaim permits",
                    })?;
            }
            *running += 1;
        }
        let _permit = Permit(shared);
        compact()
    }

    /// Whether the keyspace `name` exists.
    pub(crate) fn keyspace_exists(&self, name: &str) -> Result<bool> {
        Ok(self.db()?.keyspace_exists(name))
    }

    /// Opens, creating when missing, the keyspace `name`.
    pub(crate) fn keyspace(
        &self,
        name: &str,
        options: impl FnOnce() -> KeyspaceCreateOptions,
    ) -> Result<Keyspace> {
        if !fjall_name_is_valid(name) {
            return Err(Error::invalid(format!(
                "fjall keyspace name {name:?} must be 1 to 255 bytes"
            )));
        }
        self.db()?.keyspace(name, options).map_err(fjall_err)
    }

    /// Routes compactions of the data keyspace `name` to `factory` until
    /// [`DatabaseLease::unroute`]. Refused while another open engine routes it: two engines on
    /// one bucket (or on a copy of its directory, which names the same keyspaces) would write
    /// over each other.
    pub(crate) fn route(&self, name: &str, factory: Arc<TagThresholdFilterFactory>) -> Result<()> {
        let shared = self.shared()?;
        let mut routes = lock(&shared.routes, ROUTES)?;
        if routes.contains_key(name) {
            return Err(Error::backend(
                BACKEND,
                format!(
                    "the keyspace {name:?} of the shared fjall database {} is already open in \
                     this process (the bucket is open twice, or its directory is a copy of an \
                     open bucket's)",
                    shared.path.display()
                ),
            ));
        }
        routes.insert(name.to_owned(), factory);
        Ok(())
    }

    /// Deletes the closed bucket whose data keyspace is `keyspace` and whose metadata rows
    /// start with `meta_prefix`: the rows first (one synced batch), then the keyspace. Refused
    /// while the bucket is open in this process.
    pub(crate) fn remove_bucket(&self, keyspace: &str, meta_prefix: &[u8]) -> Result<()> {
        let shared = self.shared()?;
        let _alone = lock(&shared.creating, "fjall bucket creation")?;
        if lock(&shared.routes, ROUTES)?.contains_key(keyspace) {
            return Err(Error::backend(
                BACKEND,
                format!(
                    "the keyspace {keyspace:?} of the shared fjall database {} is open in this \
                     process: close its bucket before removing it",
                    shared.path.display()
                ),
            ));
        }
        let mut batch = shared.db.batch();
        for guard in shared.meta.prefix(meta_prefix) {
            let (key, _) = guard.into_inner().map_err(fjall_err)?;
            batch.remove(&shared.meta, key);
        }
        batch.commit().map_err(fjall_err)?;
        shared
            .db
            .persist(fjall::PersistMode::SyncAll)
            .map_err(fjall_err)?;
        if shared.db.keyspace_exists(keyspace) {
            let handle = shared
                .db
                .keyspace(keyspace, KeyspaceCreateOptions::default)
                .map_err(fjall_err)?;
            shared.db.delete_keyspace(handle).map_err(fjall_err)?;
        }
        Ok(())
    }

    /// Stops routing compactions of `name` to `factory` (they keep everything from now on).
    pub(crate) fn unroute(&self, name: &str, factory: &Arc<TagThresholdFilterFactory>) {
        if let Ok(shared) = self.shared() {
            let mut routes = lock_routes_infallibly(&shared.routes);
            if routes.get(name).is_some_and(|f| Arc::ptr_eq(f, factory)) {
                routes.remove(name);
            }
        }
    }
}

/// One reclaim's place among a database's compacting ones, given back when dropped (also when
/// the compaction fails or panics).
struct Permit<'a>(&'a SharedDatabase);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        // A count is consistent whatever panicked while the lock was held.
        let mut running = self
            .0
            .compacting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *running = running.saturating_sub(1);
        self.0.compacted.notify_one();
    }
}

impl Drop for DatabaseLease {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        // A drop cannot fail, so a poisoned registry is taken over: every change to the map is
        // one insert or remove, so it is consistent whatever panicked while it was held.
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        // The last lease closes the database while holding the registry, so nobody reopens it
        // before fjall has released its lock and joined its workers.
        if Arc::strong_count(&shared) == 1 {
            if let Some(map) = open.as_mut() {
                map.remove(&shared.path);
            }
            // The buckets' closes synced their metadata rows in the journal but left them in the
            // shared keyspace's memtable (a flush per bucket would stall every writer each time);
            // flushed once here, a reopen replays nothing of them. Best effort: the journal
            // holds them anyway.
            let _ = flush_keyspaces(&shared.db, &[&shared.meta]);
        }
        drop(shared);
    }
}

impl SharedDatabase {
    fn open(path: PathBuf, settings: &DatabaseSettings) -> Result<Self> {
        let routes: Arc<Routes> = Arc::default();
        let assigner_routes = Arc::clone(&routes);
        let mut config = Database::builder(&path)
            .worker_threads(settings.worker_threads.max(1))
            .max_journaling_size(settings.journal_bytes.max(MIN_JOURNAL_BUDGET))
            .max_cached_files(Some(settings.cached_files.max(MIN_CACHED_FILES)))
            .with_compaction_filter_factories(Arc::new(move |keyspace: &str| {
                keyspace.ends_with(DATA_SUFFIX).then(|| {
                    Arc::new(RoutedFilterFactory {
                        keyspace: keyspace.to_owned(),
                        routes: Arc::clone(&assigner_routes),
                    }) as Arc<dyn Factory>
                })
            }))
            .into_config();
        // One block cache for every database of the context: fjall 3's builder only makes a new
        // one, but its configuration holds the cache as a shared handle. Block keys carry the
        // table's tree id, unique in the process, so databases never read each other's blocks.
        config.cache = Arc::clone(&settings.cache.cache);
        let open_err = |e: fjall::Error| match e {
            fjall::Error::Locked => Error::backend(
                BACKEND,
                format!(
                    "the shared fjall database {} is locked by another process",
                    path.display()
                ),
            ),
            other => Error::backend(
                BACKEND,
                format!("opening the fjall database {}: {other}", path.display()),
            ),
        };
        let db = Database::open(config).map_err(open_err)?;
        let meta = db
            .keyspace(SHARED_META_KEYSPACE, || {
                KeyspaceCreateOptions::default().max_memtable_size(META_MEMTABLE_BYTES)
            })
            .map_err(open_err)?;
        Ok(SharedDatabase {
            meta,
            db,
            path,
            routes,
            creating: Mutex::new(()),
            compacting: Mutex::new(0),
            compacted: Condvar::new(),
            group_commit: GroupCommit::default(),
        })
    }
}

/// A fjall database builder at `path` tuned as one shared database of a context of `settings`
/// (a block cache of `cache_bytes`, its workers, its share of the journal budget and of the
/// descriptor cache): a raw fjall baseline's, so a benchmark compares Tidemark's bookkeeping,
/// not tuning. (The shared databases themselves share the context's one block cache.)
pub fn tuned_builder(
    path: &Path,
    settings: &FjallContextOptions,
) -> fjall::DatabaseBuilder<Database> {
    let shared = DatabaseSettings::new(settings);
    Database::builder(path)
        .cache_size(settings.cache_bytes)
        .worker_threads(shared.worker_threads)
        .max_journaling_size(shared.journal_bytes)
        .max_cached_files(Some(shared.cached_files))
}

/// The routes, for the callers that cannot fail (a drop, fjall's filter factory on its worker
/// thread): a poisoned lock is taken over, as each change is one insert or remove, consistent
/// whatever panicked meanwhile. Callers that can fail use `lock` and report `Error::Poisoned`.
fn lock_routes_infallibly(
    routes: &Routes,
) -> MutexGuard<'_, HashMap<String, Arc<TagThresholdFilterFactory>>> {
    routes.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The shared database directory serving `bucket_dir`: [`SHARED_DIR`] in its parent, resolved
/// as the toolkit resolves every shared layout's instances
/// ([`tidemark_disk::layout::shared::shared_dir_of`]), so every path to the same directory finds
/// one database.
pub(crate) fn shared_dir_of(bucket_dir: &Path) -> Result<PathBuf> {
    tidemark_disk::layout::shared::shared_dir_of(bucket_dir, SHARED_DIR, BACKEND)
}

/// fjall's rule for keyspace names (it panics on others).
fn fjall_name_is_valid(name: &str) -> bool {
    !name.is_empty() && name.len() <= usize::from(u8::MAX)
}

/// The filter factory fjall holds for one data keyspace: per compaction, the factory of the
/// bucket open on it, or [`KeepAll`] while none is.
struct RoutedFilterFactory {
    keyspace: String,
    routes: Arc<Routes>,
}

impl Factory for RoutedFilterFactory {
    fn name(&self) -> &str {
        "tidemark.RoutedFilterFactory"
    }

    fn make_filter(&self, _context: &Context) -> Box<dyn CompactionFilter> {
        let factory = lock_routes_infallibly(&self.routes)
            .get(&self.keyspace)
            .cloned();
        match factory {
            Some(factory) => Box::new(KeepingMarker(factory.start())),
            None => Box::new(KeepAll),
        }
    }
}

/// A bucket's filter that never sees its flush marker ([`FLUSH_MARKER_KEY`]): the marker is
/// not a tagged value, and removing it would defeat its purpose. It decides every other entry
/// by the bucket's own key, unescaped ([`bucket_key`]).
struct KeepingMarker(TagThresholdFilter);

impl CompactionFilter for KeepingMarker {
    fn filter_item(
        &mut self,
        item: ItemAccessor<'_>,
        _context: &Context,
    ) -> CompactionFilterResult {
        Ok(match bucket_key(item.key()) {
            None => Verdict::Keep,
            Some(key) => self.0.verdict(key, item),
        })
    }
}

/// The first byte of a stored key that is escaped: a bucket's key starting with it is stored with
/// it once more in front, so every stored key starting with it but the flush marker is at least
/// two bytes long, the second one this byte too.
pub(crate) const ESCAPE: u8 = 0xff;

/// The key of a bucket's flush marker in its `data` keyspace: the one byte `0xff`, which no
/// bucket key is stored as (a bucket key starting with `0xff` is stored with one more `0xff` in
/// front). A short key keeps the marker's cost small: every table holding it keeps it
/// in its key range and index in memory, and a 65,535-byte marker (the one length no bucket key
/// has) cost about 200 KiB of memory per reclaimed bucket.
pub const FLUSH_MARKER_KEY: &[u8] = &[ESCAPE];

/// How a bucket's `key` is stored in its `data` keyspace: as it is, or with [`ESCAPE`] in front
/// when it starts with it (at most [`tidemark_engine_api::MAX_KEY_LEN`] + 1 bytes, within
/// fjall's 16-bit key length).
pub(crate) fn stored_key(key: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if key.first() == Some(&ESCAPE) {
        let mut escaped = Vec::with_capacity(key.len() + 1);
        escaped.push(ESCAPE);
        escaped.extend_from_slice(key);
        std::borrow::Cow::Owned(escaped)
    } else {
        std::borrow::Cow::Borrowed(key)
    }
}

/// The bucket's key a stored key is ([`stored_key`] undone); `None` for the flush marker.
pub(crate) fn bucket_key(stored: &[u8]) -> Option<&[u8]> {
    match stored {
        [ESCAPE] => None,
        [ESCAPE, rest @ ..] => Some(rest),
        key => Some(key),
    }
}

const _: () = assert!(tidemark_engine_api::MAX_KEY_LEN < u16::MAX as usize);

/// Whether `key` is the flush marker's.
pub(crate) fn is_flush_marker(key: &[u8]) -> bool {
    key == FLUSH_MARKER_KEY
}

/// The filter of a keyspace whose bucket is not open: nothing is known about its watermark, so
/// nothing goes.
struct KeepAll;

impl CompactionFilter for KeepAll {
    fn filter_item(
        &mut self,
        _item: ItemAccessor<'_>,
        _context: &Context,
    ) -> CompactionFilterResult {
        Ok(Verdict::Keep)
    }
}
