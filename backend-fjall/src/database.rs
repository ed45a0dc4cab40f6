//! The fjall database the buckets of one directory share, and the routing of its compaction
//! filters to the bucket each keyspace belongs to.
//!
//! fjall starts a worker pool per `Database` (at least one thread) and journals every keyspace
//! of a database in one journal. One database per bucket would put a thread per bucket in the
//! process; instead the buckets whose directories sit in the same parent directory keep their
//! two keyspaces in shared databases under `<parent>/`[`SHARED_DIR`], numbered `0`, `1`, ...,
//! each opened when the first of its buckets opens and closed when the last of them closes.
//! The registry is process-wide, not per context: fjall locks its directory, so two contexts
//! must never open the same database twice.
//!
//! A database holds at most [`MAX_BUCKETS_PER_DATABASE`] buckets, a precaution: while it
//! recovers, fjall 3.1.13 (`Database::recover`) queues one flush or compaction request per
//! keyspace that needs one into channels of 1,000 with a blocking send before it starts the
//! workers that drain them, so by that reading a database of more than about 500 buckets that
//! all need one could block its own open. Neither a clean close nor a crash of 520 buckets in one
//! database reached it in tests (their keyspaces did not all need a request), but the cost of the
//! cap is small: one more worker pool per 400 buckets.
//!
//! A keyspace's compaction filter is assigned when fjall opens the keyspace (at database
//! recovery, before its bucket is open), so every `data` keyspace gets a [`RoutedFilterFactory`]
//! that looks up, per compaction, the filter factory its bucket registered; a keyspace whose
//! bucket is not open keeps everything.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};
use fjall::{Database, Keyspace, KeyspaceCreateOptions};
use tidemark_engine_api::sync::lock;
use tidemark_engine_api::{Error, Result};

use crate::compaction_filter::TagThresholdFilterFactory;
use crate::error::{BACKEND, fjall_err};
use crate::options::FjallContextOptions;

/// Name of the directory of the shared databases, beside the bucket directories they serve.
pub const SHARED_DIR: &str = ".tidemark-fjall";

/// The most buckets (two keyspaces each) one shared database takes: 800 keyspaces stay well
/// under the 1,000 requests fjall can queue while it recovers (see the module docs), with room
/// for buckets created concurrently and for keyspaces left over by deleted directories.
pub const MAX_BUCKETS_PER_DATABASE: usize = 400;

/// Suffix of a bucket's data keyspace (its tagged values), after the bucket's keyspace name.
pub const DATA_SUFFIX: &str = ".data";
/// Suffix of a bucket's metadata keyspace (watermark, applied end, format version, runs).
pub const META_SUFFIX: &str = ".meta";

/// fjall's least journal budget (its builder panics below it); smaller settings count as it.
pub const MIN_JOURNAL_BUDGET: u64 = 64 << 20;
/// fjall's least table-file descriptor cache (its builder panics below it); smaller settings
/// count as it.
pub const MIN_CACHED_FILES: usize = 10;

type Routes = Mutex<HashMap<String, Arc<TagThresholdFilterFactory>>>;

/// One open shared database and the filter factory of each open bucket's data keyspace.
pub(crate) struct SharedDatabase {
    db: Database,
    path: PathBuf,
    routes: Arc<Routes>,
    /// Held while a bucket picks its keyspace name, creates its keyspaces and routes them, so
    /// two new buckets never pick the same name.
    creating: Mutex<()>,
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
        settings: &FjallContextOptions,
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

    /// Opens (or joins) the first shared database of `bucket_dir` with room for one more bucket
    /// ([`MAX_BUCKETS_PER_DATABASE`], counting leftover keyspaces), creating the next when all
    /// are full; returns it with its number.
    pub(crate) fn open_with_room(
        bucket_dir: &Path,
        settings: &FjallContextOptions,
    ) -> Result<(Self, u32)> {
        let root = shared_dir_of(bucket_dir)?;
        for number in 0..u32::MAX {
            let path = root.join(number.to_string());
            let existed = path.is_dir();
            let lease = Self::open_at(path, settings)?;
            if !existed || lease.db()?.keyspace_count() < 2 * MAX_BUCKETS_PER_DATABASE {
                return Ok((lease, number));
            }
        }
        Err(Error::ResourceLimit {
            path: root,
            message: "every shared fjall database of this directory is full".to_owned(),
        })
    }

    fn open_at(path: PathBuf, settings: &FjallContextOptions) -> Result<Self> {
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

    /// Runs `create` alone among the buckets of this database that are being created.
    pub(crate) fn creating<T>(&self, create: impl FnOnce() -> Result<T>) -> Result<T> {
        let _alone = lock(&self.shared()?.creating, "fjall bucket creation")?;
        create()
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
        if Arc::strong_count(&shared) == 1
            && let Some(map) = open.as_mut()
        {
            map.remove(&shared.path);
        }
        drop(shared);
    }
}

impl SharedDatabase {
    fn open(path: PathBuf, settings: &FjallContextOptions) -> Result<Self> {
        let routes: Arc<Routes> = Arc::default();
        let assigner_routes = Arc::clone(&routes);
        let db = tuned_builder(&path, settings)
            .with_compaction_filter_factories(Arc::new(move |keyspace: &str| {
                keyspace.ends_with(DATA_SUFFIX).then(|| {
                    Arc::new(RoutedFilterFactory {
                        keyspace: keyspace.to_owned(),
                        routes: Arc::clone(&assigner_routes),
                    }) as Arc<dyn Factory>
                })
            }))
            .open()
            .map_err(|e| match e {
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
            })?;
        Ok(SharedDatabase {
            db,
            path,
            routes,
            creating: Mutex::new(()),
        })
    }
}

/// A fjall database builder at `path` tuned as `settings` say (block cache, workers, journal
/// budget, descriptor cache): the shared databases' own, and a raw fjall baseline's, so a
/// benchmark compares Tidemark's bookkeeping, not tuning.
pub fn tuned_builder(
    path: &Path,
    settings: &FjallContextOptions,
) -> fjall::DatabaseBuilder<Database> {
    Database::builder(path)
        .cache_size(settings.cache_bytes)
        .worker_threads(settings.worker_threads.max(1))
        .max_journaling_size(settings.journal_budget_bytes.max(MIN_JOURNAL_BUDGET))
        .max_cached_files(Some(settings.max_cached_files.max(MIN_CACHED_FILES)))
}

/// The routes, for the callers that cannot fail (a drop, fjall's filter factory on its worker
/// thread): a poisoned lock is taken over, as each change is one insert or remove, consistent
/// whatever panicked meanwhile. Callers that can fail use `lock` and report `Error::Poisoned`.
fn lock_routes_infallibly(
    routes: &Routes,
) -> MutexGuard<'_, HashMap<String, Arc<TagThresholdFilterFactory>>> {
    routes.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The shared database directory serving `bucket_dir`: [`SHARED_DIR`] in its parent, made
/// absolute and free of symbolic links (once the parent exists) so every path to the same
/// directory finds one database.
pub(crate) fn shared_dir_of(bucket_dir: &Path) -> Result<PathBuf> {
    // The bucket directory itself may be a link to a directory elsewhere.
    let resolved = std::fs::canonicalize(bucket_dir).ok();
    let bucket_dir = resolved.as_deref().unwrap_or(bucket_dir);
    let parent = match bucket_dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        Some(_) => Path::new("."),
        None => {
            return Err(Error::invalid(format!(
                "a fjall bucket directory needs a parent directory to share a database in: {}",
                bucket_dir.display()
            )));
        }
    };
    let parent = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
    Ok(parent.join(SHARED_DIR))
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

    fn make_filter(&self, context: &Context) -> Box<dyn CompactionFilter> {
        let factory = lock_routes_infallibly(&self.routes)
            .get(&self.keyspace)
            .cloned();
        match factory {
            Some(factory) => Box::new(KeepingMarker(factory.make_filter(context))),
            None => Box::new(KeepAll),
        }
    }
}

/// A bucket's filter that never sees its flush marker ([`FLUSH_MARKER_LEN`]): the marker is
/// not a tagged value, and removing it would defeat its purpose.
struct KeepingMarker(Box<dyn CompactionFilter>);

impl CompactionFilter for KeepingMarker {
    fn filter_item(&mut self, item: ItemAccessor<'_>, context: &Context) -> CompactionFilterResult {
        if is_flush_marker(item.key()) {
            return Ok(Verdict::Keep);
        }
        self.0.filter_item(item, context)
    }
}

/// Length of the key of a bucket's flush marker in its `data` keyspace: the longest key fjall
/// stores, one byte above [`tidemark_engine_api::MAX_KEY_LEN`], so no user key is ever it.
pub const FLUSH_MARKER_LEN: usize = u16::MAX as usize;

const _: () = assert!(FLUSH_MARKER_LEN > tidemark_engine_api::MAX_KEY_LEN);

/// The key of the flush marker.
pub(crate) fn flush_marker_key() -> Vec<u8> {
    vec![0xff; FLUSH_MARKER_LEN]
}

/// Whether `key` is the flush marker's (only its length can say: no user key is that long).
pub(crate) fn is_flush_marker(key: &[u8]) -> bool {
    key.len() == FLUSH_MARKER_LEN
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
