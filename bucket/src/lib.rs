//! # Tidemark bucket layer
//!
//! What sits on top of one engine (`tidemark_engine_api::Engine`, held as an
//! [`EngineHandle`](tidemark_engine_api::EngineHandle)): the [`lake`] lookuper a bucket falls back to on a
//! local miss, [`HistoricalBucket`] which orders lake refreshes before watermark publishes, and
//! the tokio [`scheduler`] that turns watermark moves into coalesced, rate-limited reclaims. The
//! contract is `docs/DESIGN.md` at the workspace root (sections *Bucket layer* and *Reclaim
//! scheduler*).

pub mod bucket;
mod error;
pub mod lake;
pub mod scheduler;

/// The attribute a [`LakeLookuper`] implementation needs (`#[async_trait]` on its `impl`),
/// re-exported so a host implements the trait without depending on the `async-trait` crate.
pub use async_trait::async_trait;
pub use bucket::{BucketStats, HistoricalBucket, LakeTimeouts, Progress};
pub use error::{Error, Result};
pub use lake::{LakeLookuper, LakeSnapshot, MemoryLake};
pub use scheduler::{
    BucketId, ReclaimPolicy, ReclaimScheduler, ReclaimStats, SchedulerConfig, SchedulerStats,
};
