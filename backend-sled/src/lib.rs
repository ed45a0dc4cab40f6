//! # Tidemark sled backend
//!
//! [`SledEngine`] stores a bucket in a [sled](https://docs.rs/sled/0.34) database with three
//! trees:
//!
//! - `data`: key → stored value in the shared value format ([`tidemark_engine_api::codec`]);
//! - `by_offset`: `offset BE ‖ key` → empty, the offset-ordered index the sweeper walks;
//! - `meta`: watermark, applied end, live-entry count and format version.
//!
//! The engine contract itself (locks, watermark, applied end, counters, reports) is the shared
//! skeleton [`tidemark_disk::DiskEngine`]; this crate supplies sled's storage primitives.
//! Each commit writes a batch, its index rows, the new applied end and the live-entry count in
//! one multi-tree sled transaction. `reclaim` runs the shared range-scan sweeper
//! ([`tidemark_disk::sweeper`]) in bounded chunks (at most [`MAX_SWEEP_CHUNK_ROWS`] rows, because a
//! sled transaction blocks every sled store in the process), so its cost is proportional to what
//! is covered and writers are only ever blocked for one chunk. See the crate README for the
//! trade-offs.

mod backend;
mod context;
mod digest;
mod engine;
mod error;
mod flusher;
mod generation;
mod meta;
mod rebuild;
mod registry;
mod scan;
mod storage;
mod sweep;
mod worker;

pub use backend::Sled;
#[cfg(feature = "testing")]
pub use backend::{SLED_WINDOW_MULTIPLE, SLED_WINDOW_PEAK_MULTIPLE};
pub use context::{
    FDS_PER_BUCKET, MEMORY_PER_BUCKET, MIN_CACHE_BYTES_PER_BUCKET, SLED_IO_THREADS, SledContext,
    SledContextOptions,
};
pub use engine::{DB_SUBDIR, MAX_SWEEP_CHUNK_ROWS, SledEngine};
pub use generation::GENERATION_FILE;
pub use rebuild::{EMPTY_STORE_BYTES, MIN_GARBAGE_BYTES, MIN_REBUILD_BYTES, REBUILD_GROWTH};
pub use tidemark_disk::sweeper::SweepTotals;
/// The traits a backend's context and marker implement (import them to call `new`, `global`,
/// `for_buckets`, `settings`, `bounds` on the context).
pub use tidemark_disk::{BackendContext, DiskBackend};
