//! Mapping sled's errors into [`engine_api::Error`].

use engine_api::Error;
use sled::transaction::TransactionError;

/// Backend name used in errors and the directory marker.
pub(crate) const BACKEND: &str = "sled";

/// Our transactions never abort on their own: this type has no values, so an
/// `Abort` cannot be constructed and needs no mapping.
#[derive(Debug)]
pub(crate) enum NoAbort {}

/// Wraps a plain sled error.
pub(crate) fn sled_error(e: sled::Error) -> Error {
    Error::backend(BACKEND, e)
}

/// Wraps the result of a sled transaction.
pub(crate) fn tx_error(e: TransactionError<NoAbort>) -> Error {
    match e {
        TransactionError::Storage(e) => sled_error(e),
        TransactionError::Abort(never) => match never {},
    }
}
