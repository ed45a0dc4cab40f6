//! # Tidemark engine API
//!
//! The contract every Tidemark backend implements, and nothing else (no async runtime). The
//! contract itself is `docs/DESIGN.md` at the root of the workspace (section *Engine contract*);
//! this crate is its code. Here: the stored value format ([`codec`]), the
//! synchronous [`Engine`] trait with its result types and the [`EngineHandle`] that holds one,
//! the shared watermark arithmetic ([`watermark`]), the range-scan [`sweeper`] loop used by the
//! B-tree backends, the offline consistency check ([`verify`]), the directory [`layout`] marker,
//! the lock policy ([`sync`]) and the in-memory reference engine [`MemoryEngine`]. The bucket layer, the lake lookuper and the reclaim
//! scheduler live in the `tidemark-bucket` crate.

pub mod batch;
pub mod budget;
pub mod codec;
pub mod contain;
pub mod cost;
pub mod covered;
pub mod disk;
pub mod engine;
pub mod error;
pub mod fault;
pub mod handle;
pub mod layout;
pub mod memory;
pub mod options;
pub mod outcome;
pub mod process;
pub mod rng;
pub mod stats;
pub mod sweeper;
pub mod sync;
pub mod turns;
pub mod verify;
pub mod watermark;

pub use batch::{MAX_KEY_LEN, MAX_OFFSET, MAX_VALUE_LEN, Record, WriteBatch};
pub use cost::ReclaimCost;
pub use engine::{Engine, OpenEngine};
pub use error::{Error, Result};
pub use handle::EngineHandle;
pub use memory::MemoryEngine;
pub use options::{EngineOptions, OpenMode};
pub use outcome::{ApplyOutcome, LocalLookup, ReclaimReport, WatermarkUpdate};
pub use stats::{CounterSnapshot, EngineCounters, EngineStats, Reclaimable};
pub use verify::{Damage, VerifyReport};
