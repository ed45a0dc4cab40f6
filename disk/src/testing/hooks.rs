//! The skeleton's test hooks (cargo feature `testing`): the storage's [`StorageHooks`] run with
//! the skeleton's locks, checks and panic containment.

use tidemark_engine_api::Result;
use tidemark_engine_api::validate_key;

use super::StorageHooks;
use crate::skeleton::DiskEngine;

impl<S: StorageHooks> DiskEngine<S> {
    /// Stores `stored` verbatim under `key`, bypassing the codec ([`StorageHooks::insert_raw`]).
    pub fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        validate_key(key)?;
        let _writer = self.lock_writer()?;
        self.check_writable("insert_raw")?;
        self.contain_write("insert_raw", |s| s.insert_raw(key, stored))
    }

    /// Writes `row` verbatim into the offset index ([`StorageHooks::insert_index_row`]).
    pub fn insert_index_row(&self, row: &[u8]) -> Result<()> {
        let _writer = self.lock_writer()?;
        self.write_storage("insert_index_row", |s| s.insert_index_row(row))
    }

    /// Removes `row` from the offset index ([`StorageHooks::remove_index_row`]).
    pub fn remove_index_row(&self, row: &[u8]) -> Result<bool> {
        let _writer = self.lock_writer()?;
        self.write_storage("remove_index_row", |s| s.remove_index_row(row))
    }

    /// Settles the storage's levels ([`StorageHooks::settle`]) under the reclaimer lock, so its
    /// removals never land in a reclaim's counts.
    pub fn settle(&self) -> Result<()> {
        self.with_reclaimer("settle", |s| s.settle())
    }
}
