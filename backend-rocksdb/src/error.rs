//! Mapping RocksDB's errors onto [`tidemark_engine_api::Error`].

use tidemark_engine_api::Error;

/// The backend name used in errors, the directory marker and `Engine::backend_name`.
pub const BACKEND: &str = "rocksdb";

/// Wraps a RocksDB error as [`Error::Backend`].
pub(crate) fn rocks_err(e: rocksdb::Error) -> Error {
    Error::backend(BACKEND, e)
}
