//! [`Fjall`]: the backend's name in the registry of disk backends ([`DiskBackend`]), and what it
//! declares to the conformance suite.

use std::path::Path;

use tidemark_disk::{DiskBackend, DiskEngine};
use tidemark_engine_api::{EngineOptions, Result};

use crate::context::FjallContext;
use crate::engine::FjallEngine;
use crate::storage::FjallStorage;

/// The fjall backend: each bucket two keyspaces of the database its directory's parent shares,
/// reclaimed by the tag-threshold compaction filter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fjall;

impl DiskBackend for Fjall {
    type Storage = FjallStorage;
    type Context = FjallContext;
    type Engine = FjallEngine;

    fn open_in(context: &FjallContext, path: &Path, options: EngineOptions) -> Result<FjallEngine> {
        FjallEngine::open_in(context, path, options)
    }

    fn skeleton(engine: &FjallEngine) -> &DiskEngine<FjallStorage> {
        engine.skeleton()
    }
}

/// Bytes on disk above the empty store per byte of the uncovered window that fjall may hold in
/// the conformance case `bytes_on_disk_bounded_by_the_window` (the table files of the bucket's
/// two keyspaces).
#[cfg(feature = "testing")]
pub const FJALL_WINDOW_MULTIPLE: f64 = 1.4;

#[cfg(feature = "testing")]
impl tidemark_disk::testing::TestedBackend for Fjall {
    const DECLARED: tidemark_disk::testing::Declared = tidemark_disk::testing::Declared {
        exact_live_entries: false,
        // The filter is armed only inside `reclaim` (see the storage module).
        background_reclaim: false,
        offset_index: false,
        // fjall has no read-only open: recovery of the shared database may write.
        read_only_files: false,
        // A bucket's data lives in the database its directory's parent shares.
        self_contained_directory: false,
        window_multiple: FJALL_WINDOW_MULTIPLE,
        window_peak_multiple: FJALL_WINDOW_MULTIPLE,
    };

    /// Memtables of 64 KiB (the least the context allows): every 64 KiB written flushes a table
    /// file.
    fn growing_context(buckets: usize) -> Result<FjallContext> {
        use tidemark_disk::BackendContext;
        FjallContext::new(crate::context::FjallContextOptions {
            max_buckets: buckets,
            memtable_bytes: 64 << 10,
            ..crate::context::FjallContextOptions::default()
        })
    }
}
