//! Errors of the lake: every failure is a [`tidemark_bucket::Error::Lake`] carrying the Iceberg,
//! Arrow or I/O error as its source, so a bucket reports it as the lake's.

use tidemark_bucket::Error;

/// An [`Error::Lake`] saying what failed, with the underlying error as its source.
pub(crate) fn lake_error(
    what: impl Into<String>,
    source: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    let what = what.into();
    let message = format!("{what}: {source}");
    Error::lake_source(message, source)
}
