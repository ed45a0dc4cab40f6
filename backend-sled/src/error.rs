//! Mapping sled's errors into [`tidemark_engine_api::Error`], and the failed-store error.

use std::path::Path;

use sled::transaction::TransactionError;
use tidemark_engine_api::Error;

/// Backend name used in errors and the directory marker.
pub(crate) const BACKEND: &str = "sled";

/// Wraps a plain sled error.
pub(crate) fn sled_error(e: sled::Error) -> Error {
    Error::backend(BACKEND, e)
}

/// Wraps the result of a sled transaction. Our transactions abort only with an engine error
/// (a damaged `meta` row), which is passed through unchanged.
pub(crate) fn tx_error(e: TransactionError<Error>) -> Error {
    match e {
        TransactionError::Storage(e) => sled_error(e),
        TransactionError::Abort(e) => e,
    }
}

/// The [`Error::StoreFailed`] that every write, watermark change, reclaim and flush of a
/// [`SledEngine`](crate::SledEngine) returns once a flush that followed a committed write has
/// failed.
///
/// After such a failure the committed write is visible (and the applied end has moved past it),
/// but it may not be on disk. A retry of the same batch would be skipped as already applied and
/// acknowledged without a flush, so the engine refuses everything that writes or promises
/// durability instead. Drop the engine and reopen the store: opening restores exactly what is
/// durable, and WAL replay from the returned applied end fills any gap. Lookups keep working.
pub(crate) fn store_failed(path: &Path, cause: Option<sled::Error>) -> Error {
    Error::store_failed(
        path,
        cause.map(|e| Box::new(e) as tidemark_engine_api::BoxedSource),
    )
}
