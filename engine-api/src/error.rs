//! The one error type every Tidemark crate returns.

use std::path::PathBuf;

/// Convenience alias used throughout Tidemark.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Boxed source error of a storage backend.
pub type BoxedSource = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in an engine, a bucket or the scheduler.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A stored value (or metadata entry) could not be decoded.
    #[error("corrupt entry for key {}: {reason}", crate::display::display_key(key))]
    Corrupt {
        /// The key whose stored bytes are corrupt.
        key: Vec<u8>,
        /// What exactly is wrong with them.
        reason: String,
    },
    /// The caller passed input outside the contract (empty or oversized key, oversized value,
    /// offsets going backwards, ...). Nothing was written.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// An operating-system I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The storage engine underneath reported an error.
    #[error("{backend} backend error: {source}")]
    Backend {
        /// Which backend failed (`"rocksdb"`, `"sled"`, `"redb"`, ...).
        backend: &'static str,
        /// The backend's own error.
        #[source]
        source: BoxedSource,
    },
    /// The engine has been closed.
    #[error("engine is closed")]
    Closed,
    /// A lock was poisoned: a thread panicked while holding it, so the state it guards may be
    /// half-updated. Every fallible call refuses with this rather than guess; reopen the store
    /// (or restart the process) to recover. Infallible paths (drops, plain getters) never write
    /// through a poisoned lock.
    #[error("{what} lock is poisoned (a thread panicked while holding it); reopen the store")]
    Poisoned {
        /// Which lock.
        what: &'static str,
    },
    /// A write may have been left half done: a flush that followed a committed write failed
    /// (sled), so writes already visible may not be durable, or the storage engine panicked
    /// during a call that writes (any disk backend; see `tidemark_disk::contain`). Every later write,
    /// watermark change, reclaim and flush returns this until the store is reopened: a retry
    /// would otherwise be acknowledged without being durable, or write over what the panic left.
    /// Lookups and stats keep working. Reopening restores exactly what is durable; replay the
    /// WAL from the applied end it reports.
    #[error("store {} must be reopened: a write failed after it may have changed the store (a failed flush after a committed write, or a panic of the storage engine), so what it made visible may not be durable", path.display())]
    StoreFailed {
        /// The bucket directory of the failed store.
        path: PathBuf,
        /// What failed the store (the failed flush, or the panic as [`Error::Backend`]), on the
        /// call that failed; `None` on every later call.
        #[source]
        cause: Option<BoxedSource>,
    },
    /// The directory belongs to a different backend.
    #[error("{path} holds a {found} store, not a {expected} store")]
    WrongBackend {
        /// The directory that was opened.
        path: PathBuf,
        /// The backend named by the directory's marker.
        found: String,
        /// The backend that tried to open it.
        expected: &'static str,
    },
    /// The directory holds files that are not a Tidemark store.
    #[error("{path} is not empty and is not a Tidemark store: {reason}")]
    ForeignDirectory {
        /// The directory that was opened.
        path: PathBuf,
        /// What was found there.
        reason: String,
    },
    /// An open that must find an existing store ([`OpenMode::MustExist`] or
    /// [`OpenMode::ReadOnly`]) found none at the path: no such directory, no marker, or a marker
    /// without the engine's files. Nothing was created there.
    ///
    /// [`OpenMode::MustExist`]: crate::options::OpenMode::MustExist
    /// [`OpenMode::ReadOnly`]: crate::options::OpenMode::ReadOnly
    #[error("no Tidemark store at {path}: {reason}")]
    NoStore {
        /// The path that was opened.
        path: PathBuf,
        /// What is missing there.
        reason: String,
    },
    /// The store's own files are missing or unusable although the directory says a store lived
    /// there: its high-water record exists but the engine's files are missing, empty or zeroed,
    /// or the high-water record itself cannot be read; or (sled) the rows the engine restored do
    /// not add up to the digest its commits recorded with them. Refused in every open mode
    /// (never opened as a new, empty store, never served older); nothing was created or changed.
    #[error("damaged store at {path}: {reason}")]
    Damaged {
        /// The bucket directory.
        path: PathBuf,
        /// What is missing or damaged (naming the file).
        reason: String,
    },
    /// The engine restored an older state than the store's durable high-water record says it
    /// had reached (its watermark or applied end is below the record): the engine lost
    /// acknowledged state, for example to a truncated or damaged log. Refused rather than
    /// served; nothing was changed.
    #[error(
        "store at {path} reopened older than it was: restored W = {watermark}, applied end \
         {applied_end}, but its high-water record {file} says W = {recorded_watermark}, applied \
         end {recorded_applied_end}"
    )]
    RolledBack {
        /// The bucket directory.
        path: PathBuf,
        /// The high-water record's file name.
        file: &'static str,
        /// `W` the engine restored.
        watermark: u64,
        /// The applied end the engine restored.
        applied_end: u64,
        /// `W` the record holds.
        recorded_watermark: u64,
        /// The applied end the record holds.
        recorded_applied_end: u64,
    },
    /// The store was opened read-only ([`OpenMode::ReadOnly`](crate::options::OpenMode::ReadOnly)):
    /// writes, watermark changes, reclaims and flushes are refused, and nothing was changed.
    #[error("store {path} is open read-only: {operation} refused")]
    ReadOnly {
        /// The store location.
        path: PathBuf,
        /// What was refused (`"apply"`, `"reclaim"`, ...).
        operation: &'static str,
    },
    /// Opening one more bucket would exceed a per-process limit: its context's bucket budget, or
    /// the file descriptors the process may open (the message names the limit and how to raise
    /// it). Nothing was opened or created.
    #[error("cannot open {}: {message}", path.display())]
    ResourceLimit {
        /// The bucket directory that was to be opened.
        path: PathBuf,
        /// Which limit, its value, and how to raise it.
        message: String,
    },
    /// The store was written by a newer (or unknown) on-disk format.
    #[error("{path} has format version {found}; this build supports up to {supported}")]
    UnsupportedFormat {
        /// The store location.
        path: PathBuf,
        /// The version found on disk.
        found: u32,
        /// The highest version this build understands.
        supported: u32,
    },
    /// The operation is not supported by this engine (for example reopening a memory engine).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A bug inside Tidemark, for example a blocking task that panicked. Nothing the caller did
    /// wrong; the operation did not complete.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Wraps a backend error.
    pub fn backend(backend: &'static str, source: impl Into<BoxedSource>) -> Self {
        Error::Backend {
            backend,
            source: source.into(),
        }
    }

    /// Builds an [`Error::Corrupt`].
    pub fn corrupt(key: &[u8], reason: impl Into<String>) -> Self {
        Error::Corrupt {
            key: key.to_vec(),
            reason: reason.into(),
        }
    }

    /// Builds an [`Error::StoreFailed`].
    pub fn store_failed(path: impl Into<PathBuf>, cause: Option<BoxedSource>) -> Self {
        Error::StoreFailed {
            path: path.into(),
            cause,
        }
    }

    /// Builds an [`Error::InvalidInput`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidInput(msg.into())
    }
}
