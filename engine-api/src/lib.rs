//! # Tidemark engine API
//!
//! The contract every Tidemark backend implements (see the workspace `DESIGN.md`): the stored
//! value format ([`codec`]), the synchronous [`Engine`] trait with its result types, the shared
//! watermark arithmetic ([`watermark`]), the range-scan [`sweeper`] loop used by the B-tree
//! backends, the directory [`layout`] marker, and the in-memory reference engine
//! [`MemoryEngine`]. On top of the engine sit the bucket layer ([`bucket`], with the [`lake`]
//! lookuper it falls back to) and the reclaim [`scheduler`].

pub mod batch;
pub mod bucket;
pub mod codec;
pub mod engine;
pub mod error;
pub mod lake;
pub mod layout;
pub mod memory;
pub mod options;
pub mod outcome;
pub mod scheduler;
pub mod stats;
pub mod sweeper;
pub mod watermark;

pub use batch::{MAX_KEY_LEN, MAX_OFFSET, MAX_VALUE_LEN, Record, WriteBatch};
pub use bucket::{BucketStats, HistoricalBucket, Progress};
pub use engine::{Engine, OpenEngine};
pub use error::{Error, Result};
pub use lake::{LakeLookuper, LakeSnapshot, MemoryLake};
pub use memory::MemoryEngine;
pub use options::EngineOptions;
pub use outcome::{ApplyOutcome, LocalLookup, ReclaimReport, WatermarkUpdate};
pub use scheduler::{BucketId, ReclaimScheduler, ReclaimStats, SchedulerConfig, SchedulerStats};
pub use stats::{CounterSnapshot, Counters, EngineStats};
