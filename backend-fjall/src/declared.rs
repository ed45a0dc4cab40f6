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

    /// Memtables of 256 KiB: every 256 KiB written flushes a table file. A descriptor cache of
    /// 64 files, so that one database's reservation ([`FjallContext::fds_per_database`]) fits
    /// the suite's low soft limits with room for several buckets.
    ///
    /// Not fjall's least, 64 KiB: with 300 buckets of one database written in turn, every write
    /// round rotated 300 memtables, faster than fjall's two workers flush them, and fjall 3.1.13
    /// deadlocked once its workers' channel of 1,000 messages was full (every worker and the
    /// writer blocked in `Keyspace::inner_rotate_memtable` sending to that channel, which only the
    /// workers drain). A quarter of the rotations keeps the headroom case's queue under it.
    fn growing_context(buckets: usize) -> Result<FjallContext> {
        use tidemark_disk::BackendContext;
        FjallContext::new(crate::options::FjallContextOptions {
            max_buckets: buckets,
            memtable_bytes: 256 << 10,
            max_cached_files: 64,
            ..crate::options::FjallContextOptions::default()
        })
    }
}
