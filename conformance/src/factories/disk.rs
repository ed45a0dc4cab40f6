//! The one factory of every disk backend: what the suite needs of a backend comes from the
//! backend's own [`TestedBackend`] declaration, so a new backend joins the suite with one line.

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use tidemark_disk::BackendContext;
use tidemark_disk::DiskEngine;
use tidemark_disk::budget::ResourceBounds;
use tidemark_disk::sweeper::SweepTotals;
use tidemark_disk::testing::{Chaos, Faults, TestedBackend};
use tidemark_engine_api::{Engine, EngineOptions, Result};

use crate::factory::{Capabilities, EngineFactory};

/// Opens engines of the disk backend `B`, each from `B`'s case context
/// ([`TestedBackend::case_context`]), with its storage inside the [`Chaos`] layer (nothing armed
/// until a case arms it), so the fault cases reach every backend.
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
        write!(f, "DiskFactory<{}>", B::BACKEND)
    }
}

impl<B: TestedBackend> EngineFactory for DiskFactory<B> {
    type Engine = DiskEngine<Chaos<B>>;
    const NAME: &'static str = B::BACKEND;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            declared: B::DECLARED,
            reopen: true,
            raw_injection: true,
            open_existing: true,
            files: true,
            faults: true,
        }
    }

    /// Also holds the backend to what it declares of itself: its engine names the backend
    /// `B::BACKEND` and reports `B::RECLAIM_COST` (the scheduler trusts the engine's figure).
    fn open(&self, dir: &Path, options: EngineOptions) -> Result<DiskEngine<Chaos<B>>> {
        let engine = DiskEngine::<Chaos<B>>::open_in(&B::case_context()?, dir, options)?;
        if engine.backend_name() != B::BACKEND || engine.reclaim_cost() != B::RECLAIM_COST {
            return Err(tidemark_engine_api::Error::Internal(format!(
                "backend {} declares reclaim cost {:?}, but its engine says {} and {:?}",
                B::BACKEND,
                B::RECLAIM_COST,
                engine.backend_name(),
                engine.reclaim_cost()
            )));
        }
        Ok(engine)
    }

    fn inject_raw(&self, engine: &DiskEngine<Chaos<B>>, key: &[u8], stored: &[u8]) -> Result<()> {
        engine.insert_raw(key, stored)
    }

    fn settle(&self, engine: &DiskEngine<Chaos<B>>) -> Result<()> {
        engine.settle()
    }

    fn last_sweep(&self, engine: &DiskEngine<Chaos<B>>) -> Option<SweepTotals> {
        engine.last_sweep()
    }

    fn faults<'a>(&self, engine: &'a DiskEngine<Chaos<B>>) -> Option<&'a Faults> {
        Some(engine.storage().faults())
    }

    fn inject_index_row(&self, engine: &DiskEngine<Chaos<B>>, row: &[u8]) -> Result<()> {
        engine.insert_index_row(row)
    }

    fn remove_index_row(&self, engine: &DiskEngine<Chaos<B>>, row: &[u8]) -> Result<bool> {
        engine.remove_index_row(row)
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
    ) -> Result<DiskEngine<B>> {
        DiskEngine::<B>::open_in(context, dir, options)
    }

    /// What `buckets` small open buckets of `context` hold at most.
    pub fn bounds(&self, context: &B::Context, buckets: usize) -> ResourceBounds {
        context.bounds(buckets)
    }
}
