//! # Tidemark
//!
//! Incremental, lake-driven reclamation of per-bucket local key-value state. Values and
//! tombstones are tagged with the WAL offset that wrote them; each bucket keeps a monotonic,
//! persisted watermark fed by the lake's confirmed progress, and everything below it is reclaimed
//! incrementally — by a compaction filter on RocksDB and fjall, by a range-scan sweeper on sled
//! and redb — while lookups fall back to the lake only on a true local miss.
//!
//! This facade re-exports what a host needs of the engine contract (`tidemark_engine_api`: the
//! [`Engine`] trait and [`EngineHandle`], [`WriteBatch`] and [`Record`], [`EngineOptions`], the
//! outcomes, statistics and errors, the [`MemoryEngine`], the [`VerifyReport`]), the bucket
//! layer (`tidemark_bucket`: [`HistoricalBucket`], [`ReclaimScheduler`], [`MemoryLake`]), the
//! process-wide opt-ins of the disk toolkit ([`contain`], [`process`]) and the backends, one per
//! cargo feature: `sled`, `redb`, `rocksdb` and `fjall`, all on by default, each re-exported as
//! the module of its name (`tidemark::redb`) with a macro of its name (`tidemark::redb!`) that
//! keeps code naming it out of a build without it. Programs choose among the compiled-in backends
//! at run time with [`Backend`]. Writing a backend takes the crates themselves
//! (`tidemark-engine-api`, `tidemark-disk`), not this facade. The contract is `docs/DESIGN.md` at
//! the workspace root.
//!
//! A host's integration, end to end:
//!
//! ```
//! use std::sync::Arc;
//!
//! use tidemark::{
//!     Backend, BackendConfig, BucketId, EngineOptions, HistoricalBucket, MemoryLake,
//!     ReclaimScheduler, SchedulerConfig, WriteBatch,
//! };
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
//! let config = BackendConfig::default(); // once per process
//! let scheduler = ReclaimScheduler::new(SchedulerConfig::default())?; // once per process
//! let dir = tempfile::tempdir()?;
//! let engine = Backend::compiled()[0].open_with(&dir.path().join("b0"), EngineOptions::default(), &config)?;
//! let lake = Arc::new(MemoryLake::new());
//! let bucket = HistoricalBucket::new(engine, lake.clone()).with_scheduler(&scheduler, BucketId(0))?;
//! bucket.recover(lake.latest().unwrap_or_default()).await?;
//!
//! let mut batch = WriteBatch::new();
//! batch.put("k", "v1", 0).put("k", "v2", 1);
//! lake.append_batch(&batch)?;
//! bucket.apply(batch).await?;
//! bucket.on_lake_progress(lake.commit(1)?).await?; // W = 1: k@0 is covered
//! assert_eq!(bucket.lookup(b"k").await?, Some(b"v2".to_vec()));
//! bucket.close().await?;
//! scheduler.shutdown().await;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

//! A host with its own lake implements [`LakeLookuper`] with the [`async_trait`] attribute
//! re-exported here, without depending on the `async-trait` crate itself:
//!
//! ```
//! use tidemark::{BucketResult as Result, LakeLookuper, LakeSnapshot, async_trait};
//!
//! /// A lake that has nothing in it, at every snapshot.
//! struct EmptyLake;
//!
//! #[async_trait]
//! impl LakeLookuper for EmptyLake {
//!     async fn refresh(&self, _snapshot: LakeSnapshot) -> Result<()> {
//!         Ok(())
//!     }
//!
//!     async fn lookup(&self, _key: &[u8]) -> Result<Option<Vec<u8>>> {
//!         Ok(None)
//!     }
//! }
//! ```

#[macro_use]
mod registry;

// The one list of disk backends: each row is the backend's `Backend` variant, its name (on the
// command line, in store markers, and the cargo feature of this crate that compiles it in), the
// module its crate is re-exported as (the same word), and its storage type. The registry generates
// from it the variant, `Backend::ALL`, `name`, `is_compiled`, the re-export, the gate macro and
// the dispatch to the storage type; DESIGN § Plugging a backend in lists what else a backend adds.
backends! {
    /// sled, reclaimed by the range-scan sweeper and rebuilt into a fresh database when it has
    /// grown or is mostly garbage; an idle bucket's database is closed while others need room.
    Sled, "sled", sled, tidemark_backend_sled::ReleasingSledStorage;
    /// redb, reclaimed by the range-scan sweeper, its file compacted when it is mostly garbage;
    /// an idle bucket's file is closed while others need room.
    Redb, "redb", redb, tidemark_backend_redb::ReleasingRedbStorage;
    /// RocksDB, reclaimed by the tag-threshold compaction filter.
    RocksDb, "rocksdb", rocksdb, tidemark_backend_rocksdb::RocksDbStorage;
    /// A pure-Rust LSM tree, reclaimed by the same tag-threshold compaction filter, armed only
    /// inside `reclaim`.
    Fjall, "fjall", fjall, tidemark_backend_fjall::FjallStorage;
}

pub mod backend;
pub mod units;

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub use backend::BackendConfig;
/// A disk backend's context and storage traits: generic code opens any backend through them
/// (`B: Storage`, [`DiskEngine::open_in`](tidemark_disk::DiskEngine::open_in)).
pub use tidemark_disk::{BackendContext, Storage};

// The engine contract, as a host uses it.
// The engine trait a host calls, how a backend is opened, and the shared handle to one.
pub use tidemark_engine_api::{Engine, EngineHandle, OpenEngine, ReclaimCost, forward_engine};
// What a host writes: batches of records tagged with their WAL offsets, and their limits.
pub use tidemark_engine_api::{MAX_KEY_LEN, MAX_OFFSET, MAX_VALUE_LEN, Record, WriteBatch};
// How an engine is opened.
pub use tidemark_engine_api::{EngineOptions, OpenMode};
// What each call reports.
pub use tidemark_engine_api::{ApplyOutcome, LocalLookup, ReclaimReport, WatermarkUpdate};
// Statistics and the O(1) reclaim estimate.
pub use tidemark_engine_api::{CounterSnapshot, Covered, EngineStats, Reclaimable};
// The one error type and its result alias.
pub use tidemark_engine_api::{Error, Result};
// The in-memory reference engine.
pub use tidemark_engine_api::MemoryEngine;
// The offline consistency check's report.
pub use tidemark_engine_api::{Damage, VerifyReport};
pub use tidemark_engine_api::{Example, Finding};
// How a key appears in messages and reports (readable when printable, hex otherwise).
pub use tidemark_engine_api::display_key;

/// The opt-in panic hook of the disk backends' containment: a host that calls
/// [`quiet_contained_panics`](contain::quiet_contained_panics) once at startup no longer sees
/// the default hook's message for a storage engine panic that was turned into an error.
pub mod contain {
    pub use tidemark_disk::contain::{ContainedPanics, contained_panics, quiet_contained_panics};
}

/// The process's file-descriptor limit, which the disk backends' budgets admit buckets against:
/// a host raises it here (or with `ulimit -n`) before opening many buckets.
pub mod process {
    pub use tidemark_disk::process::{FdLimit, fd_limit, set_fd_limit, set_fd_soft_limit};
}
pub use tidemark_bucket::{
    BucketId, BucketStats, HistoricalBucket, LakeLookuper, LakeSnapshot, LakeTimeouts, MemoryLake,
    Progress, ReclaimPolicy, ReclaimScheduler, ReclaimStats, SchedulerConfig, SchedulerStats,
    async_trait,
};
/// What the bucket layer fails with: an engine error passed through, the lake, a shut-down
/// scheduler ([`BucketError`] converts from [`Error`], so `?` works in code that calls both).
pub use tidemark_bucket::{Error as BucketError, Result as BucketResult};

/// The bucket layer: lake lookuper, bucket and reclaim scheduler.
pub use tidemark_bucket as bucket;

/// The Apache Iceberg lake: tiering writer, lookuper, expiry and compaction (cargo feature
/// `iceberg`).
#[cfg(feature = "iceberg")]
pub use tidemark_lake_iceberg as iceberg;
