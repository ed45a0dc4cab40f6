//! What the bucket layer fails with: the engine's errors, passed through unchanged, and the two
//! failures only this layer has (the lake, a shut-down scheduler).

use tidemark_engine_api::BoxedSource;

/// The result of a bucket-layer call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of a bucket, its lake calls or the reclaim scheduler.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine underneath failed; its error says what to do
    /// ([`tidemark_engine_api::Error`]).
    #[error(transparent)]
    Engine(#[from] tidemark_engine_api::Error),
    /// The lake lookuper failed or timed out. Nothing was published: `W` and the served snapshot
    /// are unchanged, and a local miss is refused rather than answered from a stale lake.
    #[error("lake error: {message}")]
    Lake {
        /// What failed.
        message: String,
        /// The lake client's own error, when there is one.
        #[source]
        source: Option<BoxedSource>,
    },
    /// The reclaim scheduler has been shut down: it takes no new registrations or requests.
    #[error("the reclaim scheduler is shut down")]
    Closed,
    /// An argument the bucket layer refuses (a snapshot that goes backwards, a setting out of
    /// range); nothing changed.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// What the call needs is not available here (a runtime without a timer, for example).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A bug inside Tidemark, for example a blocking task that panicked. Nothing the caller did
    /// wrong; the operation did not complete.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Builds an [`Error::Lake`] without a source error.
    pub fn lake(message: impl Into<String>) -> Self {
        Error::Lake {
            message: message.into(),
            source: None,
        }
    }

    /// Builds an [`Error::Lake`] that keeps the lake client's error as its source.
    pub fn lake_source(message: impl Into<String>, source: impl Into<BoxedSource>) -> Self {
        Error::Lake {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Builds an [`Error::InvalidInput`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidInput(message.into())
    }

    /// The engine's error, when the engine is what failed.
    pub fn as_engine(&self) -> Option<&tidemark_engine_api::Error> {
        match self {
            Error::Engine(e) => Some(e),
            _ => None,
        }
    }
}
