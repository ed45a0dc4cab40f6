//! [`BackendContext`]: a backend's per-process shared resources, and the process-wide default
//! context of each backend.

use std::any::Any;
use std::fmt;
use std::path::Path;
use std::sync::Mutex;

use tidemark_engine_api::Result;

use crate::budget::{BucketBudget, BucketLease, ResourceBounds};

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

    /// The bound on open stores under which the storages of this context's buckets are
    /// released while idle and reopened on demand, when the backend's engine runs on
    /// [`Releasing`](crate::release::Releasing); `None` (the default): never released.
    fn open_stores(&self) -> Option<&crate::release::OpenStores> {
        None
    }

    /// Takes a place in the budget for the bucket at `bucket_dir`, before anything of it is
    /// created, so a refused open leaves no trace ([`BucketBudget::admit`]). A backend whose
    /// buckets share files elsewhere reserves against where those files are.
    fn admit(&self, bucket_dir: &Path) -> Result<BucketLease> {
        self.budget().admit(bucket_dir)
    }
}

/// The process-wide default context of `C`, created with `C::Options::default()` on first use.
/// One slot per context type, so a backend declares no static of its own. The slots are only
/// ever pushed to, once a context exists, so a panic elsewhere cannot leave them half-updated
/// (the lock is recovered, not refused), and a context is created outside the lock, so backends
/// never wait for each other's first open (two racing creations keep the first).
fn global<C: BackendContext>() -> Result<C> {
    static GLOBALS: Mutex<Vec<Box<dyn Any + Send + Sync>>> = Mutex::new(Vec::new());
    let find = |globals: &[Box<dyn Any + Send + Sync>]| {
        globals.iter().find_map(|c| c.downcast_ref::<C>()).cloned()
    };
    if let Some(context) = find(&tidemark_engine_api::sync::lock_recovered(&GLOBALS)) {
        return Ok(context);
    }
    let created = C::new(C::Options::default())?;
    let mut globals = tidemark_engine_api::sync::lock_recovered(&GLOBALS);
    if let Some(first) = find(&globals) {
        return Ok(first);
    }
    globals.push(Box::new(created.clone()));
    Ok(created)
}
