//! # Tidemark redb backend
//!
//! [`RedbEngine`] keeps a bucket in one redb database file with three tables:
//!
//! * `data`: key → tagged value (the `tidemark_engine_api::codec` format, byte for byte);
//! * `by_offset`: `offset BE ‖ key` → `()`, written in the same transaction as the data row;
//! * `meta`: watermark, applied end and format version.
//!
//! Reclamation is the shared range-scan sweeper of `tidemark_disk::sweeper`; this crate only
//! supplies the chunk transaction. See the crate README for the trade-offs.

mod backend;
mod context;
mod db;
mod engine;
mod error;
mod storage;
mod sweep;
mod tables;

#[cfg(feature = "testing")]
pub use backend::REDB_WINDOW_MULTIPLE;
pub use backend::Redb;
pub use context::{
    FDS_PER_BUCKET, MEMORY_PER_BUCKET, MIN_CACHE_BYTES_PER_BUCKET, RedbContext, RedbContextOptions,
};
pub use engine::{DB_FILE, RedbDiskStats, RedbEngine};
/// The traits a backend's context and marker implement (import them to call `new`, `global`,
/// `for_buckets`, `settings`, `bounds` on the context).
pub use tidemark_disk::{BackendContext, DiskBackend};
