//! The test hooks through the layer (cargo feature `testing`): the conformance suite runs a
//! backend whose engine is [`Releasing`] on the real release path,
//! `DiskEngine<Chaos<Releasing<S>>>`, with `S`'s own hooks and declarations.

use std::path::Path;

use tidemark_engine_api::Result;

use super::{Releasable, Releasing};
use crate::testing::{Declared, StorageHooks, TestedBackend};

impl<S: StorageHooks + Releasable> StorageHooks for Releasing<S> {
    fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        let store = self.store()?;
        self.writing(&store, |s| s.insert_raw(key, stored))
    }

    fn insert_index_row(&self, row: &[u8]) -> Result<()> {
        let store = self.store()?;
        self.writing(&store, |s| s.insert_index_row(row))
    }

    fn remove_index_row(&self, row: &[u8]) -> Result<bool> {
        let store = self.store()?;
        self.writing(&store, |s| s.remove_index_row(row))
    }

    fn settle(&self) -> Result<()> {
        let store = self.store()?;
        self.writing(&store, |s| s.settle())
    }
}

/// What `S` declares, and the contexts its cases open from.
impl<S: TestedBackend + Releasable> TestedBackend for Releasing<S> {
    const DECLARED: Declared = S::DECLARED;

    fn case_context() -> Result<S::Context> {
        S::case_context()
    }

    fn growing_context(buckets: usize) -> Result<S::Context> {
        S::growing_context(buckets)
    }

    fn reads_detect_damage_in(file: &Path) -> bool {
        S::reads_detect_damage_in(file)
    }
}
