//! What can stop a comparison, kept apart by who has to act: the user (a setting, a backend this
//! build lacks, an output path), the backend (an engine, bucket or lake call), or the harness
//! itself (its model, a task, a chart).

use std::path::PathBuf;

/// Why a comparison could not run or finish. A wrong *answer* of a backend is not an error: it
/// is counted in the report (`RunReport::correct`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting that cannot run as given; the message names the option.
    #[error("invalid setting: {0}")]
    Config(String),
    /// A backend this build does not have.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A store directory or output file could not be created, written or removed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "cannot create the output directory".
        what: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// An engine call of a run failed.
    #[error(transparent)]
    Engine(#[from] tidemark::Error),
    /// A bucket of the run failed (its engine, its lake, or the scheduler).
    #[error(transparent)]
    Bucket(#[from] tidemark::BucketError),
    /// The harness failed: its model cannot answer what a check asks, a task did not complete,
    /// a chart or the JSON report could not be rendered.
    #[error("internal error: {0}")]
    Harness(String),
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

/// The result of a comparison's calls.
pub type Result<T> = std::result::Result<T, Error>;
