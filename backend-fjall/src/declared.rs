//! What the backend declares to the conformance suite: its
//! [`TestedBackend`](tidemark_disk::testing::TestedBackend) (cargo feature `testing`).

use tidemark_engine_api::Result;

use crate::context::FjallContext;
use crate::storage::FjallStorage;

/// Bytes on disk above the empty store per byte of the uncovered window that fjall may hold in
/// the conformance case `bytes_on_disk_bounded_by_the_window` (the table files of the bucket's
/// two keyspaces).
pub const FJALL_WINDOW_MULTIPLE: f64 = 1.4;

impl tidemark_disk::testing::TestedBackend for FjallStorage {
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
    /// file. A descriptor cache of 64 files, so that one database's reservation
    /// ([`FjallContext::fds_per_database`]) fits the suite's low soft limits with room for
    /// several buckets.
    fn growing_context(buckets: usize) -> Result<FjallContext> {
        use tidemark_disk::BackendContext;
        FjallContext::new(crate::options::FjallContextOptions {
            max_buckets: buckets,
            memtable_bytes: 64 << 10,
            max_cached_files: 64,
            ..crate::options::FjallContextOptions::default()
        })
    }
}
