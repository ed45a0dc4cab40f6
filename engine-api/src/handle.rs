//! [`EngineHandle`]: the one cheap, cloneable way to hold an engine.

use std::fmt;
use std::sync::Arc;

use crate::engine::Engine;

/// A shared handle to one bucket's engine, whatever its backend: what `Backend::open` returns
/// and what the bucket layer and the reclaim scheduler take.
///
/// Cloning is a reference-count increment; every clone is the same engine. The handle is an
/// [`Engine`] itself, so every engine call works on it directly. A caller that also needs the
/// concrete type (backend-specific diagnostics) keeps an `Arc<ConcreteEngine>` and converts a
/// clone of it with [`From`].
///
/// ```
/// use std::sync::Arc;
///
/// use tidemark_engine_api::{Engine, EngineHandle, EngineOptions, MemoryEngine};
///
/// let engine = Arc::new(MemoryEngine::new(EngineOptions::default()));
/// let handle = EngineHandle::from(Arc::clone(&engine));
/// handle.put(b"k", b"v", 0)?;
/// assert_eq!(engine.applied_end(), 1); // the same engine
/// assert_eq!(handle.clone().backend_name(), "memory");
/// # Ok::<(), tidemark_engine_api::Error>(())
/// ```
#[derive(Clone)]
pub struct EngineHandle(Arc<dyn Engine>);

impl EngineHandle {
    /// Wraps an engine.
    pub fn new(engine: impl Engine + 'static) -> Self {
        EngineHandle(Arc::new(engine))
    }

    /// The shared engine.
    pub fn as_arc(&self) -> &Arc<dyn Engine> {
        &self.0
    }

    /// Whether two handles share one engine.
    pub fn same_engine(&self, other: &EngineHandle) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<E: Engine + 'static> From<Arc<E>> for EngineHandle {
    fn from(engine: Arc<E>) -> Self {
        EngineHandle(engine)
    }
}

impl From<Arc<dyn Engine>> for EngineHandle {
    fn from(engine: Arc<dyn Engine>) -> Self {
        EngineHandle(engine)
    }
}

impl From<Box<dyn Engine>> for EngineHandle {
    fn from(engine: Box<dyn Engine>) -> Self {
        EngineHandle(Arc::from(engine))
    }
}

impl std::ops::Deref for EngineHandle {
    type Target = dyn Engine;

    fn deref(&self) -> &(dyn Engine + 'static) {
        &*self.0
    }
}

impl AsRef<dyn Engine> for EngineHandle {
    fn as_ref(&self) -> &(dyn Engine + 'static) {
        &*self.0
    }
}

impl fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineHandle")
            .field("backend", &self.0.backend_name())
            .field("watermark", &self.0.watermark())
            .field("applied_end", &self.0.applied_end())
            .finish()
    }
}

impl Engine for EngineHandle {
    crate::forward_engine!(0);
}
