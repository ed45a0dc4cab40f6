//! What a disk backend crate implements so that the facade, the conformance suite and the tools
//! can open its buckets without knowing it: [`DiskBackend`] (its name, storage, reclaim cost,
//! engine and open) and [`BackendContext`] (its per-process shared resources).
//!
//! Adding a backend is one crate implementing these two traits (and, for the conformance suite,
//! `testing::TestedBackend`), its variant, name and cargo feature in the facade's `Backend` with
//! one registry arm, and a factory alias and a test file in the conformance crate.

use std::fmt;
use std::path::Path;

use tidemark_engine_api::{Engine, EngineOptions, ReclaimCost, Result};

use crate::budget::ResourceBounds;
use crate::{DiskEngine, Storage};

/// A disk backend: a marker type naming it, implemented once in its crate.
///
/// ```
/// use tidemark_disk::{BackendContext, DiskBackend};
/// use tidemark_engine_api::EngineOptions;
///
/// // Generic code opens a bucket of any backend from that backend's shared context.
/// fn open_one<B: DiskBackend>(dir: &std::path::Path) -> tidemark_engine_api::Result<B::Engine> {
///     let context = B::Context::global()?;
///     B::open_in(&context, dir, EngineOptions::default())
/// }
/// ```
pub trait DiskBackend: Send + Sync + 'static {
    /// The backend's name, on the command line, in the directory marker and in errors: its
    /// storage's [`Storage::BACKEND`].
    const NAME: &'static str = <Self::Storage as Storage>::BACKEND;

    /// What a reclaim of this backend costs, declared by its storage
    /// ([`Storage::RECLAIM_COST`]); the scheduler picks its reclaim policy from it
    /// ([`Engine::reclaim_cost`] reports the same value).
    const RECLAIM_COST: ReclaimCost = <Self::Storage as Storage>::RECLAIM_COST;

    /// The storage primitives the shared skeleton runs on.
    type Storage: Storage;

    /// The per-process resources every bucket of the backend shares.
    type Context: BackendContext;

    /// The engine of one bucket.
    type Engine: Engine + fmt::Debug + 'static;

    /// Opens (by default creating, as `options.open_mode` says) the bucket at `path`, taking its
    /// share of `context`.
    fn open_in(
        context: &Self::Context,
        path: &Path,
        options: EngineOptions,
    ) -> Result<Self::Engine>;

    /// The shared skeleton under `engine`: the diagnostics and test hooks every disk backend has
    /// are written once there, not forwarded by each engine.
    fn skeleton(engine: &Self::Engine) -> &DiskEngine<Self::Storage>;
}

/// A backend's per-process shared resources (bucket budget, caches, background threads): created
/// once by the host and passed to every open; cheap to clone.
pub trait BackendContext: Clone + fmt::Debug + Send + Sync + 'static {
    /// The settings a context is created with.
    type Options: Clone + fmt::Debug + Default + Send + Sync;

    /// Creates the shared resources.
    fn new(options: Self::Options) -> Result<Self>;

    /// The process-wide default context (default settings), created on first use.
    fn global() -> Result<Self>;

    /// A context with the default settings admitting `buckets` buckets.
    fn for_buckets(buckets: usize) -> Result<Self>;

    /// The settings it was created with.
    fn settings(&self) -> &Self::Options;

    /// Buckets open from this context now.
    fn open_buckets(&self) -> usize;

    /// What `buckets` small open buckets of this context hold at most (threads, descriptors,
    /// memory); the scale test holds the backend to it.
    fn bounds(&self, buckets: usize) -> ResourceBounds;
}
