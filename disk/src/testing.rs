//! Test hooks of the disk backends (cargo feature `testing`): what the conformance suite needs
//! beyond its [`Storage`] to run every case on a backend, declared by the backend itself.
//!
//! A storage implements [`StorageHooks`] (raw rows that bypass the codec, offset-index rows,
//! settling its levels); the skeleton wraps them as `DiskEngine::insert_raw` and friends, with the
//! same locks and panic containment as its own writes. A backend implements [`TestedBackend`]:
//! the facts the suite holds it to ([`Declared`]) and the contexts its cases open from.

use std::path::Path;

use tidemark_engine_api::{Error, Result};

mod chaos;
mod fault;
mod hooks;

pub use chaos::Chaos;
pub use fault::{ChunkHook, FaultPoint, Faults};

use crate::context::BackendContext;
use crate::storage::Storage;

/// A storage's test-only primitives. Called by the skeleton under its writer lock (or, for
/// [`StorageHooks::settle`], its reclaimer lock), contained like its own writes.
pub trait StorageHooks: Storage {
    /// Stores `stored` verbatim under `key`, bypassing the codec, reachable by reclamation: a
    /// storage with an offset index indexes it at its tag, or at offset 0 when the bytes have no
    /// readable tag, so any reclaim with a threshold above 0 meets it, keeps it and counts it.
    fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()>;

    /// Writes `row` verbatim into the offset index (cases about unreadable index rows); refused
    /// where the storage has none.
    fn insert_index_row(&self, row: &[u8]) -> Result<()> {
        let _ = row;
        Err(no_offset_index(Self::BACKEND))
    }

    /// Removes `row` from the offset index, returning whether it was there (cases about data
    /// rows missing their index row); refused where the storage has none.
    fn remove_index_row(&self, row: &[u8]) -> Result<bool> {
        let _ = row;
        Err(no_offset_index(Self::BACKEND))
    }

    /// Pushes everything written so far as deep into storage as it goes (an LSM: flush, then
    /// compact to the bottom level), so cases can place older versions of a key below newer
    /// ones. Nothing where storage has no levels.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
}

fn no_offset_index(backend: &str) -> Error {
    Error::Unsupported(format!("{backend} has no offset index"))
}

/// What a backend declares about itself beyond the core contract; the conformance suite holds it
/// to each figure and skips the cases a missing capability rules out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Declared {
    /// `stats().live_entries` is exact (an LSM only estimates it).
    pub exact_live_entries: bool,
    /// Covered entries may also disappear outside `reclaim` (an LSM's compactions run the
    /// filter).
    pub background_reclaim: bool,
    /// Reclaim sweeps an offset-ordered index with the shared sweeper, so the index-row hooks
    /// work and `last_sweep` reports row-level work.
    pub offset_index: bool,
    /// A read-only open leaves every file byte for byte as it was.
    pub read_only_files: bool,
    /// The whole store lives in the bucket directory: a copy of the directory is a copy of the
    /// store.
    pub self_contained_directory: bool,
    /// Bytes on disk above the empty store per byte of the uncovered window a store may hold at
    /// the end of a long stream with a trailing lake: a measurement with headroom, so a backend
    /// whose space amplification grows fails the case.
    pub window_multiple: f64,
    /// The same, after any reclaim over the last half of the stream: at least `window_multiple`,
    /// higher for a backend whose size swings from reclaim to reclaim.
    pub window_peak_multiple: f64,
}

/// A disk backend with its test hooks: the conformance suite's one generic factory runs every
/// case on any backend that implements it.
pub trait TestedBackend: StorageHooks {
    /// What the backend declares (see [`Declared`]).
    const DECLARED: Declared;

    /// The context each case's engine opens from; by default the process-wide one. A backend
    /// whose interesting paths need settings small stores never reach (sled's rebuild) returns
    /// a context that reaches them.
    fn case_context() -> Result<Self::Context> {
        Self::Context::global()
    }

    /// A context admitting `buckets` buckets in which a bucket's files follow its writes quickly
    /// (an LSM: the smallest memtables); by default [`BackendContext::for_buckets`].
    fn growing_context(buckets: usize) -> Result<Self::Context> {
        Self::Context::for_buckets(buckets)
    }

    /// Whether damage to the store file `file` (relative to the bucket directory) is always
    /// caught by the engine's own checksums when an entry in it is read, so every lookup it fails
    /// must be `Error::Corrupt` naming the key.
    fn reads_detect_damage_in(file: &Path) -> bool {
        let _ = file;
        false
    }
}
