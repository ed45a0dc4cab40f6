//! [`SledDiagnostics`]: what only the sled backend reports, called on its engine so that each
//! call into sled runs with the skeleton's containment (a panic of sled on a damaged log is an
//! error, never an unwind into the caller).

use tidemark_disk::DiskEngine;
use tidemark_engine_api::Result;

use crate::ReleasingSledStorage;
use crate::storage::SledStorage;

/// sled's own figures of a bucket (`use` the trait to call them on a
/// [`SledEngine`](crate::SledEngine)); the plain counters are on [`SledStorage`]. Each call
/// runs on the open database, reopening a released one.
pub trait SledDiagnostics {
    /// The generation of the sled database in use: 0 until the bucket's first rebuild, then one
    /// more with each ([`crate::GENERATION_FILE`] names it on disk).
    fn generation(&self) -> Result<u64>;

    /// sled's own figure for the bytes its files occupy (with those of a generation switched
    /// away from that a reader still held).
    fn size_on_disk(&self) -> Result<u64>;
}

impl SledDiagnostics for DiskEngine<ReleasingSledStorage> {
    fn generation(&self) -> Result<u64> {
        self.read_storage("generation", |s| s.inner()?.generation_number())
    }

    fn size_on_disk(&self) -> Result<u64> {
        self.read_storage("size_on_disk", |s| s.inner()?.size_on_disk())
    }
}

impl SledDiagnostics for DiskEngine<SledStorage> {
    fn generation(&self) -> Result<u64> {
        self.read_storage("generation", SledStorage::generation_number)
    }

    fn size_on_disk(&self) -> Result<u64> {
        self.read_storage("size_on_disk", SledStorage::size_on_disk)
    }
}
