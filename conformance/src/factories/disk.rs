//! The one factory of every disk backend: what the suite needs of a backend comes from the
//! backend's own [`TestedBackend`] declaration, so a new backend joins the suite with one line.

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use tidemark_disk::BackendContext;
use tidemark_disk::budget::ResourceBounds;
use tidemark_disk::sweeper::SweepTotals;
use tidemark_disk::testing::TestedBackend;
use tidemark_engine_api::{Engine, EngineOptions, Result};

use crate::factory::{Capabilities, EngineFactory};

/// Opens engines of the disk backend `B`, each from `B`'s case context
/// ([`TestedBackend::case_context`]).
pub struct DiskFactory<B>(PhantomData<fn() -> B>);

impl<B> DiskFactory<B> {
    /// The factory (it holds nothing).
    pub const fn new() -> Self {
        DiskFactory(PhantomData)
    }
}

impl<B> Default for DiskFactory<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B> Clone for DiskFactory<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for DiskFactory<B> {}

impl<B: TestedBackend> fmt::Debug for DiskFactory<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DiskFactory<{}>", B::NAME)
    }
}

impl<B: TestedBackend> EngineFactory for DiskFactory<B> {
    type Engine = B::Engine;
    const NAME: &'static str = B::NAME;

    fn capabilities(&self) -> Capabilities {
        let declared = B::DECLARED;
        Capabilities {
            reopen: true,
            exact_live_entries: declared.exact_live_entries,
            raw_injection: true,
            background_reclaim: declared.background_reclaim,
            offset_index: declared.offset_index,
            open_existing: true,
            read_only_files: declared.read_only_files,
            files: true,
            self_contained: declared.self_contained_directory,
            faults: true,
        }
    }

    /// Also holds the backend to what it declares of itself: its engine names the backend
    /// `B::NAME` and reports `B::RECLAIM_COST` (the scheduler trusts the engine's figure).
    fn open(&self, dir: &Path, options: EngineOptions) -> Result<B::Engine> {
        let engine = B::open_in(&B::case_context()?, dir, options)?;
        if engine.backend_name() != B::NAME || engine.reclaim_cost() != B::RECLAIM_COST {
            return Err(tidemark_engine_api::Error::Internal(format!(
                "backend {} declares reclaim cost {:?}, but its engine says {} and {:?}",
                B::NAME,
                B::RECLAIM_COST,
                engine.backend_name(),
                engine.reclaim_cost()
            )));
        }
        Ok(engine)
    }

    fn inject_raw(&self, engine: &B::Engine, key: &[u8], stored: &[u8]) -> Result<()> {
        B::skeleton(engine).insert_raw(key, stored)
    }

    fn settle(&self, engine: &B::Engine) -> Result<()> {
        B::skeleton(engine).settle()
    }

    fn last_sweep(&self, engine: &B::Engine) -> Option<SweepTotals> {
        B::skeleton(engine).last_sweep()
    }

    fn faults<'a>(&self, engine: &'a B::Engine) -> Option<&'a tidemark_disk::fault::Faults> {
        Some(B::skeleton(engine).faults())
    }

    fn inject_index_row(&self, engine: &B::Engine, row: &[u8]) -> Result<()> {
        B::skeleton(engine).insert_index_row(row)
    }

    fn remove_index_row(&self, engine: &B::Engine, row: &[u8]) -> Result<bool> {
        B::skeleton(engine).remove_index_row(row)
    }

    fn window_multiple(&self) -> Option<f64> {
        Some(B::DECLARED.window_multiple)
    }

    fn window_peak_multiple(&self) -> Option<f64> {
        Some(B::DECLARED.window_peak_multiple)
    }

    fn reads_detect_damage_in(&self, file: &Path) -> bool {
        B::reads_detect_damage_in(file)
    }
}

/// What the scale and descriptor-headroom scenarios open buckets from.
impl<B: TestedBackend> DiskFactory<B> {
    /// A fresh context admitting exactly `buckets` buckets.
    pub fn scale_context(&self, buckets: usize) -> Result<B::Context> {
        B::Context::for_buckets(buckets)
    }

    /// A fresh context admitting `buckets` buckets whose files follow their writes quickly
    /// ([`TestedBackend::growing_context`]).
    pub fn growing_context(&self, buckets: usize) -> Result<B::Context> {
        B::growing_context(buckets)
    }

    /// Opens the bucket at `dir` from `context`.
    pub fn open_in(
        &self,
        context: &B::Context,
        dir: &Path,
        options: EngineOptions,
    ) -> Result<B::Engine> {
        B::open_in(context, dir, options)
    }

    /// What `buckets` small open buckets of `context` hold at most.
    pub fn bounds(&self, context: &B::Context, buckets: usize) -> ResourceBounds {
        context.bounds(buckets)
    }
}
