//! # Tidemark fjall backend
//!
//! [`FjallEngine`] stores one bucket in two keyspaces of a [fjall](https://crates.io/crates/fjall)
//! database, a pure-Rust LSM tree, and reclaims covered entries with the **tag-threshold
//! compaction filter** ([`TagThresholdFilterFactory`]): an entry is removed when
//! `tag + distance <= supplier()`, the supplier read once per compaction, through the disk
//! toolkit's shared decision ([`tidemark_disk::compaction_policy::ThresholdPolicy`], the one RocksDB's
//! filter applies). `reclaim()` flushes and major-compacts the bucket's `data` keyspace, so
//! everything covered when it starts is physically gone when it returns.
//!
//! fjall starts a worker pool per database, so the buckets whose directories share a parent
//! share one database (at `<parent>/.tidemark-fjall`): threads and descriptors stay flat however
//! many buckets a process opens. Each bucket directory holds its marker, its high-water record
//! and the name of its keyspaces.
//!
//! The engine is the shared [`DiskEngine`](tidemark_disk::DiskEngine) skeleton over the fjall storage,
//! which supplies only fjall's primitives.

mod backend;
mod compaction_filter;
mod context;
mod database;
mod engine;
mod error;
mod storage;

#[cfg(feature = "testing")]
pub use backend::FJALL_WINDOW_MULTIPLE;
pub use backend::Fjall;
pub use compaction_filter::{TagThresholdFilter, TagThresholdFilterFactory};
pub use context::{
    FDS_PER_BUCKET, FIXED_FDS_PER_DATABASE, FjallContext, FjallContextOptions, MEMORY_PER_BUCKET,
};
pub use database::{
    DATA_SUFFIX, FLUSH_MARKER_LEN, MAX_BUCKETS_PER_DATABASE, META_SUFFIX, MIN_CACHED_FILES,
    MIN_JOURNAL_BUDGET, SHARED_DIR, tuned_builder,
};
pub use engine::FjallEngine;
pub use error::BACKEND;
/// The fjall crate this backend is built on (for baselines tuned like its buckets).
pub use fjall;
pub use storage::{KEYSPACE_RECORD, data_keyspace_options, flush_keyspaces};
/// The shared tag-threshold decision's counters and supplier type (from the disk toolkit).
pub use tidemark_disk::compaction_policy::{
    FilterCounterSnapshot, FilterCounters, ThresholdSupplier,
};
/// The traits a backend's context and marker implement (import them to call `new`, `global`,
/// `for_buckets`, `settings`, `bounds` on the context).
pub use tidemark_disk::{BackendContext, DiskBackend};
