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

mod context;
mod db;
#[cfg(feature = "testing")]
mod declared;
mod diagnostics;
mod error;
mod storage;
mod sweep;
mod tables;

pub use context::{
    FDS_PER_BUCKET, MEMORY_PER_BUCKET, MEMORY_PER_RELEASED_BUCKET, MIN_CACHE_BYTES_PER_BUCKET,
    RedbContext, RedbContextOptions,
};
#[cfg(feature = "testing")]
pub use declared::REDB_WINDOW_MULTIPLE;
pub use diagnostics::RedbDiagnostics;
pub use storage::{DB_FILE, RedbDiskStats, RedbStorage};

/// A bucket stored in one redb file (`<dir>/bucket.redb`) with tables `data`, `by_offset` and
/// `meta`.
///
/// * `apply` writes the batch's data rows, their index rows and the new applied end in one write
///   transaction, committed with `Durability::Immediate` when `sync_writes` is true and
///   `Durability::None` otherwise (a non-durable commit may be lost on a crash, but it is never
///   torn: redb commits are atomic).
/// * `advance_watermark` / `adopt_lake_watermark` always commit durably before returning.
/// * `options.open_mode` decides whether the file is created (`Database::create`), must exist
///   (`Database::open`), or is opened with redb's read-only open (`ReadOnlyDatabase`), which
///   never writes to it.
/// * `reclaim` runs the shared sweeper with one write transaction per chunk of
///   `sweep_chunk_rows` index rows, so writers wait for at most one chunk, and ends with one
///   durable commit; then, when the file is mostly garbage and its live pages are few, with a
///   `Database::compact` that gives the space back (see the crate README).
///
/// The storage is [`RedbStorage`] inside the release layer ([`ReleasingRedbStorage`]): while
/// the bucket is idle and its context needs room for another bucket's file
/// (`max_open_stores`), its file is closed and reopened on demand. The file's path is the
/// storage's ([`RedbStorage::file`], `engine.storage().inner()?`); redb's own figures are
/// [`RedbDiagnostics::disk_stats`].
pub type RedbEngine = DiskEngine<ReleasingRedbStorage>;

/// The storage a [`RedbEngine`] runs on: [`RedbStorage`], released while idle
/// ([`tidemark_disk::release`]); the facade and the conformance suite name the backend by it.
pub type ReleasingRedbStorage = Releasing<RedbStorage>;
pub use tidemark_disk::release::Releasing;
/// The toolkit's context trait (import it to call `new`, `global`, `for_buckets`, `settings`,
/// `bounds`) and the engine every backend's is.
pub use tidemark_disk::{BackendContext, DiskEngine};
