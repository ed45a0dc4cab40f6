//! What a disk backend crate implements so that the facade, the conformance suite and the tools
//! can open its buckets without knowing it: a [`Storage`] (whose [`Storage::Context`] is its
//! [`BackendContext`], its per-process shared resources). Its engine is [`DiskEngine`] over that
//! storage; [`DiskBackend`] is how generic code names a backend (every storage is one).
//!
//! DESIGN § Plugging a backend in lists every place outside its crate that names a backend.

use std::any::Any;
use std::fmt;
use std::path::Path;
use std::sync::Mutex;

use tidemark_engine_api::{EngineOptions, Result};

use crate::budget::{BucketBudget, BucketLease, ResourceBounds};
use crate::{DiskEngine, Storage};

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

/// A backend's per-process shared resources (bucket budget, caches, background threads): created
/// once by the host and passed to every open; cheap to clone.
pub trait BackendContext: Clone + fmt::Debug + Send + Sync + 'static {
    /// The settings a context is created with.
    type Options: Clone + fmt::Debug + Default + Send + Sync;

    /// Creates the shared resources.
    fn new(options: Self::Options) -> Result<Self>;

    /// A context with the default settings admitting `buckets` buckets.
    fn for_buckets(buckets: usize) -> Result<Self>;

    /// The settings it was created with.
    fn settings(&self) -> &Self::Options;

    /// The bucket budget every open of this context takes a place in.
    fn budget(&self) -> &BucketBudget;

    /// What `buckets` small open buckets of this context hold at most (threads, descriptors,
    /// memory); the scale test holds the backend to it.
    fn bounds(&self, buckets: usize) -> ResourceBounds;

    /// The process-wide default context (default settings), created on first use;
    /// [`OpenEngine::open`](tidemark_engine_api::OpenEngine::open) opens engines from it.
    fn global() -> Result<Self> {
        global::<Self>()
    }

    /// Buckets open from this context now.
    fn open_buckets(&self) -> usize {
        self.budget().open_buckets()
    }

    /// Takes a place in the budget for the bucket at `bucket_dir`, before anything of it is
    /// created, so a refused open leaves no trace ([`BucketBudget::admit`]). A backend whose
    /// buckets share files elsewhere reserves against where those files are.
    fn admit(&self, bucket_dir: &Path) -> Result<BucketLease> {
        self.budget().admit(bucket_dir)
    }
}

/// The process-wide default context of `C`, created with `C::Options::default()` on first use.
/// One slot per context type, so a backend declares no static of its own.
fn global<C: BackendContext>() -> Result<C> {
    static GLOBALS: Mutex<Vec<Box<dyn Any + Send + Sync>>> = Mutex::new(Vec::new());
    let mut globals = tidemark_engine_api::sync::lock(&GLOBALS, "process-wide default contexts")?;
    if let Some(context) = globals.iter().find_map(|c| c.downcast_ref::<C>()) {
        return Ok(context.clone());
    }
    let context = C::new(C::Options::default())?;
    globals.push(Box::new(context.clone()));
    Ok(context)
}
