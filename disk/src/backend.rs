//! What a disk backend crate implements so that the facade, the conformance suite and the tools
//! can open its buckets without knowing it: a [`Storage`] (whose [`Storage::Context`] is its
//! [`BackendContext`](crate::BackendContext), its per-process shared resources). Its engine is [`DiskEngine`] over that
//! storage; [`DiskBackend`] is how generic code names a backend (every storage is one).
//!
//! DESIGN § Plugging a backend in lists every place outside its crate that names a backend.

use std::path::Path;

use tidemark_engine_api::{EngineOptions, Result};

use crate::skeleton::DiskEngine;
use crate::storage::Storage;

/// A disk backend as generic code names it: every [`Storage`] is one, and its engine is the
/// shared [`DiskEngine`] over it.
///
/// ```
/// use tidemark_disk::{BackendContext, DiskBackend, DiskEngine};
/// use tidemark_engine_api::EngineOptions;
///
/// // Generic code opens a bucket of any backend from that backend's shared context.
/// fn open_one<B: DiskBackend>(dir: &std::path::Path) -> tidemark_engine_api::Result<DiskEngine<B>> {
///     let context = B::Context::global()?;
///     B::open_in(&context, dir, EngineOptions::default())
/// }
/// ```
pub trait DiskBackend: Storage {
    /// The backend's name, on the command line, in the directory marker and in errors: its
    /// storage's [`Storage::BACKEND`].
    const NAME: &'static str = <Self as Storage>::BACKEND;

    /// Opens (by default creating, as `options.open_mode` says) the bucket at `path`, taking its
    /// share of `context` ([`DiskEngine::open_in`]).
    fn open_in(
        context: &Self::Context,
        path: &Path,
        options: EngineOptions,
    ) -> Result<DiskEngine<Self>>;
}

impl<S: Storage> DiskBackend for S {
    fn open_in(context: &S::Context, path: &Path, options: EngineOptions) -> Result<DiskEngine<S>> {
        DiskEngine::open_in(context, path, options)
    }
}
