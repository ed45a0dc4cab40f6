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
//! skeleton [`DiskEngine`]; this crate supplies sled's storage primitives ([`SledStorage`]).
//! Each commit writes a batch, its index rows, the new applied end and the live-entry count in
//! one multi-tree sled transaction. `reclaim` runs the shared range-scan sweeper
//! ([`tidemark_disk::sweeper`]) in bounded chunks (at most [`MAX_SWEEP_CHUNK_ROWS`] rows, because a
//! sled transaction blocks every sled store in the process), so its cost is proportional to what
//! is covered and writers are only ever blocked for one chunk. See the crate README for the
//! trade-offs.

mod bucket;
mod context;
#[cfg(feature = "testing")]
mod declared;
mod diagnostics;
mod digest;
mod error;
mod flusher;
mod generation;
mod malloc;
mod meta;
mod progress;
mod rebuild;
mod rebuild_rule;
mod registry;
mod scan;
mod storage;
mod sweep;
mod worker;

pub use context::{
    FDS_PER_BUCKET, MEMORY_PER_BUCKET, MEMORY_PER_RELEASED_BUCKET, MIN_CACHE_BYTES_PER_BUCKET,
    SLED_IO_THREADS, SLED_MAX_OPEN_STORES, SledContext, SledContextOptions,
};
#[cfg(feature = "testing")]
pub use declared::{SLED_WINDOW_MULTIPLE, SLED_WINDOW_PEAK_MULTIPLE};
pub use diagnostics::SledDiagnostics;
pub use generation::{DB_SUBDIR, GENERATION_FILE};
pub use malloc::FIXED_MMAP_THRESHOLD;
pub use storage::{MAX_SWEEP_CHUNK_ROWS, SledStorage};

/// A bucket stored in sled, reclaimed by the shared range-scan sweeper.
///
/// The engine contract (locks, `W` and the applied end, counters, reports) is the shared
/// [`DiskEngine`]; its storage is [`SledStorage`] inside the release layer
/// ([`ReleasingSledStorage`]): while the bucket is idle and its context needs room for another
/// bucket's database (`max_open_stores`), its database is closed and reopened on demand. sled's
/// plain counters are its storage's (`engine.storage().inner()?`), what calls into sled is
/// [`SledDiagnostics`]. The applied end and the live-entry count
/// change in the same transaction as the rows they describe; the watermark is written to `meta`
/// and flushed before it is published.
///
/// sled has no read-only mode: with [`tidemark_engine_api::OpenMode::ReadOnly`] the engine writes nothing
/// and refuses every write, but sled itself opens its files read-write, takes its lock and may
/// extend or rewrite its own log and snapshot files while it recovers at open and flushes at
/// close (the keys and values stay the same).
///
/// If a flush that follows a committed write fails, the engine is marked failed: from then on
/// every write, watermark change, reclaim and flush returns [`tidemark_engine_api::Error::StoreFailed`]
/// until the store is reopened (see there why a retry must not simply succeed).
pub type SledEngine = DiskEngine<ReleasingSledStorage>;

/// The storage a [`SledEngine`] runs on: [`SledStorage`], released while idle
/// ([`tidemark_disk::release`]); the facade and the conformance suite name the backend by it.
pub type ReleasingSledStorage = Releasing<SledStorage>;
pub use rebuild_rule::{EMPTY_STORE_BYTES, MIN_GARBAGE_BYTES, MIN_REBUILD_BYTES, REBUILD_GROWTH};
pub use tidemark_disk::release::Releasing;
pub use tidemark_disk::sweeper::SweepTotals;
/// The toolkit's context trait (import it to call `new`, `global`, `for_buckets`, `settings`,
/// `bounds`) and the engine every backend's is.
pub use tidemark_disk::{BackendContext, DiskEngine};
