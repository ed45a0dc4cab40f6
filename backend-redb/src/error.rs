//! Mapping redb's many error types onto [`tidemark_engine_api::Error`].

use tidemark_engine_api::Error;

/// The backend name used in errors, the directory marker and `Engine::backend_name`.
pub(crate) const BACKEND: &str = "redb";

/// Converts any redb error (they all convert into `redb::Error`) into an engine error.
pub(crate) fn redb_error(e: impl Into<redb::Error>) -> Error {
    Error::backend(BACKEND, e.into())
}

/// `?`-friendly conversion: `txn.commit().redb()?`.
pub(crate) trait RedbResultExt<T> {
    /// Maps the error side through [`redb_error`].
    fn redb(self) -> tidemark_engine_api::Result<T>;
}

impl<T, E: Into<redb::Error>> RedbResultExt<T> for Result<T, E> {
    fn redb(self) -> tidemark_engine_api::Result<T> {
        self.map_err(redb_error)
    }
}
