//! Runtime choice among the backends compiled into this build.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use tidemark_disk::{BackendContext, DiskEngine, Storage};
use tidemark_engine_api::{EngineHandle, EngineOptions, Error, Result};

use crate::{Visit, visit};

pub use crate::Backend;

impl Backend {
    /// Whether the backend stores data on disk (and can be reopened).
    pub fn is_persistent(self) -> bool {
        self != Backend::Memory
    }

    /// The backends compiled into this build, in a stable order.
    pub fn compiled() -> Vec<Backend> {
        Self::ALL.into_iter().filter(|b| b.is_compiled()).collect()
    }

    /// The backend of the store at `path`, read from its `TIDEMARK` marker; creates and changes
    /// nothing.
    ///
    /// Errors: [`Error::NoStore`] when there is no store (no such directory, an empty one),
    /// [`Error::ForeignDirectory`] when the directory holds files but no readable marker,
    /// [`Error::Unsupported`] when the marker names a backend this build does not know.
    ///
    /// ```
    /// use tidemark::{Backend, EngineOptions, Error};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("bucket-3");
    /// assert!(matches!(Backend::detect(&path), Err(Error::NoStore { .. })));
    /// let backend = Backend::compiled().into_iter().find(|b| b.is_persistent()).unwrap();
    /// drop(backend.open(&path, EngineOptions::default())?);
    /// assert_eq!(Backend::detect(&path)?, backend);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn detect(path: &Path) -> Result<Backend> {
        let marker = tidemark_disk::layout::read_marker(path)?;
        Self::ALL
            .into_iter()
            .find(|b| b.name() == marker.backend)
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "{} holds a store of backend {:?}, which this build does not know \
                     (it knows {})",
                    path.display(),
                    marker.backend,
                    Self::NAMES
                ))
            })
    }

    /// Opens (by default creating) a bucket of this backend at `path` with the default
    /// [`BackendConfig`]: `open_with(path, options, &BackendConfig::default())`.
    ///
    /// ```
    /// use tidemark::{Backend, Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Backend::compiled()[0].open(&dir.path().join("bucket-0"), EngineOptions::default())?;
    /// engine.put(b"k", b"v", 0)?;
    /// assert_eq!(engine.applied_end(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(self, path: &Path, options: EngineOptions) -> Result<EngineHandle> {
        self.open_with(path, options, &BackendConfig::default())
    }

    /// Opens (by default creating) a bucket of this backend at `path`, taking shared, per-process
    /// resources from `config` (set it up once and pass it to every open).
    ///
    /// `options.open_mode` ([`OpenMode`](tidemark_engine_api::OpenMode)) decides whether a missing store
    /// is created (the default), or the open requires an existing one (read-write or read-only)
    /// and creates nothing.
    ///
    /// [`Backend::Memory`] keeps nothing on disk: it ignores `path` (and says so in a `debug`
    /// event), and every open is a new, empty engine; an open that requires an existing store is
    /// [`Error::NoStore`].
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use tidemark::{Backend, BackendConfig, EngineOptions, HistoricalBucket, MemoryLake};
    ///
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
    /// let config = BackendConfig::default(); // e.g. `.with_context(context)` on a server
    /// let dir = tempfile::tempdir()?;
    /// let backend = Backend::compiled()[0];
    /// let engine = backend.open_with(&dir.path().join("bucket-7"), EngineOptions::default(), &config)?;
    /// let lake = Arc::new(MemoryLake::new());
    /// let bucket = HistoricalBucket::new(engine, lake.clone());
    /// let replay_from = bucket.recover(lake.latest().unwrap_or_default()).await?;
    /// assert_eq!(replay_from, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_with(
        self,
        path: &Path,
        options: EngineOptions,
        config: &BackendConfig,
    ) -> Result<EngineHandle> {
        match self {
            Backend::Memory if !options.open_mode.creates() => Err(Error::NoStore {
                path: path.to_path_buf(),
                reason: "the memory backend keeps nothing on disk to open".to_string(),
            }),
            Backend::Memory => {
                tracing::debug!(
                    path = %path.display(),
                    "the memory backend keeps nothing on disk and ignores the path"
                );
                Ok(EngineHandle::new(tidemark_engine_api::MemoryEngine::new(
                    options,
                )))
            }
            disk => visit(
                disk,
                OpenBucket {
                    path,
                    options,
                    config,
                },
            ),
        }
    }

    /// Removes the closed bucket at `path` for good, with `config`'s context of this backend:
    /// its rows where it shares an instance with other buckets (RocksDB), then its directory
    /// ([`DiskEngine::remove_in`]). Deleting a bucket directory by hand would leave a shared
    /// instance holding its rows. A directory that is not a store of this backend is refused; the
    /// memory backend has nothing on disk to remove.
    pub fn remove_bucket(self, path: &Path, config: &BackendConfig) -> Result<()> {
        match self {
            Backend::Memory => Ok(()),
            disk => visit(disk, RemoveBucket { path, config }),
        }
    }
}

/// Per-process configuration of the backends, set up once by the host and passed to every
/// [`Backend::open_with`]: each disk backend's context (bucket budget, caches, background
/// threads), at most one per backend. A backend without one here opens from its process-wide
/// default context ([`BackendContext::global`], 1,024 buckets).
///
/// ```
/// use tidemark::{Backend, BackendConfig, EngineOptions};
///
/// // A host with up to 2,000 buckets: one budget per backend, created once.
/// let config = BackendConfig::for_buckets(2_000)?;
/// let dir = tempfile::tempdir()?;
/// for backend in Backend::compiled().into_iter().filter(|b| b.is_persistent()) {
///     let engine = backend.open_with(&dir.path().join(backend.name()), EngineOptions::default(), &config)?;
///     drop(engine); // gives its share of the budget back
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct BackendConfig {
    /// Contexts by their type: each backend has a context type of its own.
    contexts: HashMap<TypeId, Arc<dyn SharedContext>>,
}

/// A context as the config stores it: any backend's, printable.
trait SharedContext: Any + fmt::Debug + Send + Sync {}

impl<C: BackendContext> SharedContext for C {}

impl BackendConfig {
    /// A fresh context for every compiled disk backend with its default settings, each admitting
    /// `buckets` buckets (and sized for them: see each context's `for_buckets`).
    pub fn for_buckets(buckets: usize) -> Result<Self> {
        Backend::compiled()
            .into_iter()
            .try_fold(Self::default(), |config, backend| {
                config.with_budget(backend, buckets)
            })
    }

    /// This config with a fresh context for `backend` alone, admitting `buckets` buckets
    /// ([`BackendContext::for_buckets`]); the other backends keep theirs. Nothing for the memory
    /// backend, or for a backend that is not compiled in. A host that uses one backend creates
    /// only its context (another backend's would start its threads for nothing).
    pub fn with_budget(self, backend: Backend, buckets: usize) -> Result<Self> {
        if backend == Backend::Memory || !backend.is_compiled() {
            return Ok(self);
        }
        visit(
            backend,
            Budget {
                config: self,
                buckets,
            },
        )
    }

    /// Shares `context` among every bucket of its backend opened with this config (replacing the
    /// context that backend had here).
    ///
    /// ```
    /// # #[cfg(feature = "redb")] {
    /// use tidemark::redb::{RedbContext, RedbContextOptions, RedbStorage};
    /// use tidemark::{BackendConfig, BackendContext};
    ///
    /// let context = RedbContext::new(RedbContextOptions::default())?;
    /// let config = BackendConfig::default().with_context(context);
    /// assert!(config.context::<RedbStorage>().is_some());
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_context<C: BackendContext>(mut self, context: C) -> Self {
        self.contexts.insert(TypeId::of::<C>(), Arc::new(context));
        self
    }

    /// The context of backend `B` in this config, `None` when it has none (its buckets open from
    /// the process-wide default).
    pub fn context<B: Storage>(&self) -> Option<&B::Context> {
        let context: &dyn Any = self.contexts.get(&TypeId::of::<B::Context>())?.as_ref();
        context.downcast_ref()
    }
}

disk_backend_items! {
    /// Opens a bucket of the visited backend from its context in the config, or its default.
    struct OpenBucket<'a> {
        path: &'a Path,
        options: EngineOptions,
        config: &'a BackendConfig,
    }
}

impl Visit for OpenBucket<'_> {
    type Output = EngineHandle;

    fn visit<B: Storage>(self) -> Result<EngineHandle> {
        let engine = match self.config.context::<B>() {
            Some(context) => DiskEngine::<B>::open_in(context, self.path, self.options)?,
            None => DiskEngine::<B>::open_in(&B::Context::global()?, self.path, self.options)?,
        };
        Ok(EngineHandle::new(engine))
    }
}

disk_backend_items! {
    /// Removes a closed bucket of the visited backend.
    struct RemoveBucket<'a> {
        path: &'a Path,
        config: &'a BackendConfig,
    }
}

impl Visit for RemoveBucket<'_> {
    type Output = ();

    fn visit<B: Storage>(self) -> Result<()> {
        match self.config.context::<B>() {
            Some(context) => DiskEngine::<B>::remove_in(context, self.path),
            None => DiskEngine::<B>::remove_in(&B::Context::global()?, self.path),
        }
    }
}

disk_backend_items! {
    /// Adds a fresh context of the visited backend, sized for so many buckets.
    struct Budget {
        config: BackendConfig,
        buckets: usize,
    }
}

impl Visit for Budget {
    type Output = BackendConfig;

    fn visit<B: Storage>(self) -> Result<BackendConfig> {
        let context = B::Context::for_buckets(self.buckets)?;
        Ok(self.config.with_context(context))
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown backend {s:?}; expected one of {}",
                    Self::NAMES
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tidemark_engine_api::Engine;

    #[test]
    fn memory_ignores_the_path_and_opens_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("never-created");
        let a = Backend::Memory
            .open(&path, EngineOptions::default())
            .unwrap();
        a.put(b"k", b"v", 0).unwrap();
        let b = Backend::Memory
            .open(&path, EngineOptions::default())
            .unwrap();
        assert_eq!((a.applied_end(), b.applied_end()), (1, 0));
        assert!(!path.exists());
    }

    #[test]
    fn names_round_trip() {
        for b in Backend::ALL {
            assert_eq!(b.name().parse::<Backend>().unwrap(), b);
        }
        let unknown = "leveldb".parse::<Backend>().unwrap_err().to_string();
        for b in Backend::ALL {
            assert!(unknown.contains(b.name()), "{unknown}");
        }
        assert!(Backend::compiled().contains(&Backend::Memory));
    }

    #[test]
    fn a_backend_not_compiled_in_names_its_feature() {
        let dir = tempfile::tempdir().unwrap();
        for b in Backend::ALL.into_iter().filter(|b| !b.is_compiled()) {
            let err = b
                .open(&dir.path().join(b.name()), EngineOptions::default())
                .unwrap_err();
            assert!(matches!(err, Error::Unsupported(_)), "{err}");
            assert!(
                err.to_string()
                    .contains(&format!("enable the `{}` cargo feature", b.name())),
                "{err}"
            );
            assert!(!dir.path().join(b.name()).exists());
            let config = BackendConfig::default().with_budget(b, 10).unwrap();
            assert!(config.contexts.is_empty());
        }
    }

    #[test]
    fn every_compiled_backend_opens_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        for b in Backend::compiled()
            .into_iter()
            .filter(|b| b.is_persistent())
        {
            let path = dir.path().join(b.name());
            {
                let e = b.open(&path, EngineOptions::default()).unwrap();
                e.put(b"k", b"v", 3).unwrap();
                e.advance_watermark(2).unwrap();
            }
            let e = b.open(&path, EngineOptions::default()).unwrap();
            assert_eq!(e.backend_name(), b.name());
            assert_eq!((e.watermark(), e.applied_end()), (2, 4), "{b}");
        }
    }

    #[test]
    fn detect_reads_the_marker_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        assert!(matches!(
            Backend::detect(&missing),
            Err(Error::NoStore { .. })
        ));
        assert!(!missing.exists());
        for b in Backend::compiled()
            .into_iter()
            .filter(|b| b.is_persistent())
        {
            let path = dir.path().join(b.name());
            drop(b.open(&path, EngineOptions::default()).unwrap());
            assert_eq!(Backend::detect(&path).unwrap(), b);
        }
        let unknown = dir.path().join("unknown");
        std::fs::create_dir(&unknown).unwrap();
        std::fs::write(
            unknown.join(tidemark_disk::layout::MARKER_FILE),
            "backend=leveldb\nformat=1\n",
        )
        .unwrap();
        let err = Backend::detect(&unknown).unwrap_err();
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("leveldb"), "{err}");
    }

    #[test]
    fn memory_has_no_existing_store_to_open() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [
            tidemark_engine_api::OpenMode::MustExist,
            tidemark_engine_api::OpenMode::ReadOnly,
        ] {
            let options = EngineOptions::default().with_open_mode(mode);
            let err = Backend::Memory.open(dir.path(), options).unwrap_err();
            assert!(matches!(err, Error::NoStore { .. }), "{err}");
        }
    }

    #[test]
    fn a_store_cannot_be_opened_by_another_backend() {
        let persistent: Vec<_> = Backend::compiled()
            .into_iter()
            .filter(|b| b.is_persistent())
            .collect();
        let dir = tempfile::tempdir().unwrap();
        for (i, a) in persistent.iter().enumerate() {
            let path = dir.path().join(a.name());
            drop(a.open(&path, EngineOptions::default()).unwrap());
            let other = persistent[(i + 1) % persistent.len()];
            if other != *a {
                let err = other.open(&path, EngineOptions::default()).err().unwrap();
                assert!(
                    matches!(err, Error::WrongBackend { .. }),
                    "{other} on {a}: {err}"
                );
            }
        }
    }
}
