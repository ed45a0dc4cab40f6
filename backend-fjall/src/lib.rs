//! # Tidemark fjall backend
//!
//! [`FjallEngine`] stores one bucket in a keyspace of a [fjall](https://crates.io/crates/fjall)
//! database (its metadata rows in a keyspace the database's buckets share), a pure-Rust LSM tree, and reclaims covered entries with the **tag-threshold
//! compaction filter** ([`TagThresholdFilterFactory`]): an entry is removed when
//! `tag + distance <= supplier()`, the supplier read once per compaction, through the disk
//! toolkit's shared decision ([`tidemark_disk::compaction_policy::ThresholdPolicy`], the one RocksDB's
//! filter applies). `reclaim()` flushes and major-compacts the bucket's `data` keyspace, so
//! everything covered when it starts is physically gone when it returns.
//!
//! fjall starts a worker pool per database, so the buckets whose directories share a parent
//! share databases of up to 999 buckets (at `<parent>/.tidemark-fjall/<n>`), and every database
//! of a context shares its block cache: threads and descriptors grow by one database per 999
//! buckets. Each bucket directory holds its marker, its high-water record and the name of its
//! keyspace.
//!
//! The engine is the shared [`DiskEngine`] skeleton over the fjall storage ([`FjallStorage`]),
//! which supplies only fjall's primitives and diagnostics.

mod compaction_filter;
mod context;
mod database;
#[cfg(feature = "testing")]
mod declared;
mod diagnostics;
mod error;
mod group_commit;
mod options;
mod storage;

pub use compaction_filter::{TagThresholdFilter, TagThresholdFilterFactory};
pub use context::{FIXED_FDS_PER_DATABASE, FjallContext, MEMORY_PER_BUCKET};
pub use database::{
    DATA_SUFFIX, FLUSH_MARKER_KEY, MAX_BUCKETS_PER_DATABASE, MAX_KEYSPACES_PER_DATABASE,
    MIN_CACHED_FILES, MIN_JOURNAL_BUDGET, RECLAIMS_PER_DATABASE, SHARED_DIR, SHARED_META_KEYSPACE,
    tuned_builder,
};
#[cfg(feature = "testing")]
pub use declared::FJALL_WINDOW_MULTIPLE;
pub use diagnostics::FjallDiagnostics;
pub use error::BACKEND;
/// The fjall crate this backend is built on (for baselines tuned like its buckets).
pub use fjall;
pub use options::FjallContextOptions;
pub use storage::{FjallStorage, KEYSPACE_RECORD, data_keyspace_options, flush_keyspaces};

/// A Tidemark engine on fjall; reclaims with the watermark compaction filter.
///
/// `reclaim()` flushes, then major-compacts the bucket's `data` keyspace into its last level, so
/// everything covered when it starts is physically gone when it returns. Its report counts what
/// the filter removed during the call, exactly: the filter is armed only inside a reclaim, with
/// the threshold fixed when it started. `reclaim_below` does the same with the filter's threshold
/// replaced by `min(threshold, W)` for the duration of the call.
///
/// ```no_run
/// use tidemark_backend_fjall::{BackendContext, FjallContext, FjallContextOptions, FjallEngine};
/// use tidemark_engine_api::{Engine, EngineOptions};
///
/// let ctx = FjallContext::new(FjallContextOptions::default())?;
/// let engine = FjallEngine::open_in(&ctx, "/tmp/buckets/1".as_ref(), EngineOptions::default())?;
/// engine.put(b"k", b"v", 0)?;
/// engine.advance_watermark(1)?;
/// assert_eq!(engine.reclaim()?.values_removed, 1);
/// # Ok::<(), tidemark_engine_api::Error>(())
/// ```
///
/// Its plain figures are the storage's ([`DiskEngine::storage`]: the shared database's path, the
/// keyspace name, the filter's counters); what calls into fjall is [`FjallDiagnostics`].
pub type FjallEngine = DiskEngine<FjallStorage>;
/// The shared tag-threshold decision's counters and supplier type (from the disk toolkit).
pub use tidemark_disk::compaction_policy::{
    FilterCounterSnapshot, FilterCounters, ThresholdSupplier,
};
/// The toolkit's context trait (import it to call `new`, `global`, `for_buckets`, `settings`,
/// `bounds`) and the engine every backend's is.
pub use tidemark_disk::{BackendContext, DiskEngine};
