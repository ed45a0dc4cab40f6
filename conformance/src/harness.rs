//! A fresh engine in its own temporary directory, with a `reopen` that closes and reopens it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tempfile::TempDir;
use tidemark_engine_api::{Engine, EngineOptions};

use crate::factory::{Capabilities, EngineFactory};

/// One engine under test: a temporary directory, the factory that opened it and the options it
/// was opened with, so that [`Harness::reopen`] opens the very same store again.
pub struct Harness<F: EngineFactory> {
    factory: Arc<F>,
    options: EngineOptions,
    path: PathBuf,
    engine: Option<F::Engine>,
    // Dropped last (fields drop in declaration order), after the engine has closed its files.
    _tmp: TempDir,
}

impl<F: EngineFactory> Harness<F> {
    /// Opens a fresh engine with default options.
    pub fn new(factory: F) -> Self {
        Self::with_options(factory, EngineOptions::default())
    }

    /// Opens a fresh engine with `options`. The store lives in a directory that does not exist
    /// yet (`<tmp>/bucket`), so every case also exercises "a missing directory is created".
    pub fn with_options(factory: F, options: EngineOptions) -> Self {
        Self::shared(Arc::new(factory), options)
    }

    /// Opens a fresh engine with `options` from a shared factory (for cases that open many
    /// stores, such as the property test).
    pub fn shared(factory: Arc<F>, options: EngineOptions) -> Self {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("tidemark-conf-{}-", F::NAME))
            .tempdir()
            .expect("create temporary directory");
        let path = tmp.path().join("bucket");
        let engine = factory
            .open(&path, options.clone())
            .unwrap_or_else(|e| panic!("{}: open {}: {e}", F::NAME, path.display()));
        Harness {
            factory,
            options,
            path,
            engine: Some(engine),
            _tmp: tmp,
        }
    }

    /// The engine under test.
    pub fn engine(&self) -> &F::Engine {
        self.engine.as_ref().expect("engine is open")
    }

    /// The factory.
    pub fn factory(&self) -> &F {
        &self.factory
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.factory.capabilities()
    }

    /// The options the engine was opened with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary directory holding the store (for sibling stores).
    pub fn scratch(&self) -> &Path {
        self._tmp.path()
    }

    /// Opens another, independent engine of the same backend in `<tmp>/<name>` with `options`.
    /// It lives as long as the caller keeps it (drop it before the harness).
    pub fn open_sibling(&self, name: &str, options: EngineOptions) -> F::Engine {
        let path = self.scratch().join(name);
        self.factory
            .open(&path, options)
            .unwrap_or_else(|e| panic!("{}: open {}: {e}", F::NAME, path.display()))
    }

    /// Drops the engine (closing it) and opens the same directory with the same options.
    ///
    /// Panics when the backend lacks [`Capabilities::reopen`]: a case that reopens must declare
    /// the need so the stamped test skips it instead.
    pub fn reopen(&mut self) -> &F::Engine {
        assert!(
            self.capabilities().reopen,
            "{}: reopen called on a backend that cannot reopen (declare Need::Reopen)",
            F::NAME
        );
        drop(self.engine.take());
        let engine = self
            .factory
            .open(&self.path, self.options.clone())
            .unwrap_or_else(|e| panic!("{}: reopen {}: {e}", F::NAME, self.path.display()));
        self.engine.insert(engine)
    }

    /// Stores raw bytes under `key`, bypassing the codec (needs [`Capabilities::raw_injection`]).
    pub fn inject_raw(&self, key: &[u8], stored: &[u8]) {
        self.factory
            .inject_raw(self.engine(), key, stored)
            .unwrap_or_else(|e| panic!("{}: inject_raw: {e}", F::NAME));
    }

    /// Closes the engine (for cases that reopen by hand).
    pub fn close(&mut self) {
        drop(self.engine.take());
    }

    /// Backend name with the engine's own name checked against the factory's.
    pub fn backend(&self) -> &'static str {
        let name = self.engine().backend_name();
        assert_eq!(
            name,
            F::NAME,
            "engine and factory disagree on the backend name"
        );
        name
    }
}
