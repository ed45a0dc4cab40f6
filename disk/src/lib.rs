//! # Tidemark disk toolkit
//!
//! What the disk backends (RocksDB, fjall, sled, redb) build on, over the contract of `tidemark_engine_api`:
//!
//! - the one skeleton every disk backend shares: [`DiskEngine`] implements the whole
//!   [`Engine`](tidemark_engine_api::Engine) contract over a backend's [`Storage`] primitives
//!   ([`StorageInit`], [`ReclaimRequest`], [`ReclaimWork`], [`LiveEntries`]), with its
//!   metadata keys ([`meta`]);
//! - the range-scan [`sweeper`] loop of the B-tree backends (sled, redb) and the [`turns`] that
//!   let writers in between its chunks;
//! - the directory [`layout`] marker and the durable high-water record
//!   ([`layout::high_water`]);
//! - the per-process file-descriptor [`budget`] and what it reads of the [`process`];
//! - what a backend crate implements to plug in: [`Storage`] and [`BackendContext`] (and, for
//!   the conformance suite, `testing::TestedBackend`); generic code names a backend by its
//!   storage (`B: Storage`) and opens it with [`DiskEngine::open_in`];
//! - the tag-threshold decision the LSM backends' compaction filters share
//!   ([`compaction_policy`]) and the watermark threshold they apply ([`watermark_threshold`]);
//! - panic containment of storage calls ([`contain`]);
//! - idle buckets that release their files and reopen on demand ([`release`]: sled, redb);
//! - with the cargo feature `testing`, the test hooks and the `testing::Chaos` layer that
//!   injects faults around any storage.

pub mod budget;
pub mod compaction_policy;
pub mod contain;
mod context;
pub mod layout;
pub mod meta;
pub mod offset_index;
pub mod process;
pub mod release;
mod skeleton;
mod storage;
pub mod sweeper;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod turns;
pub mod watermark_threshold;

pub use context::BackendContext;
pub use layout::high_water::{self, HighWater};
pub use meta::MetaKey;
pub use skeleton::DiskEngine;
pub use storage::{
    CommitRequest, LiveEntries, ReadStored, ReclaimRequest, ReclaimWork, Storage, StorageInit,
};
