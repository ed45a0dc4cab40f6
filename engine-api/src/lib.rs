//! # Tidemark engine API
//!
//! The contract every Tidemark backend implements, and nothing else: it knows no storage engine
//! and no async runtime. The contract itself is `docs/DESIGN.md` at the root of the workspace
//! (section *Engine contract*); this crate is its code. Here:
//!
//! - the write and read types: [`batch`] ([`WriteBatch`], [`Record`]), the stored value format
//!   ([`codec`]), how keys appear in messages ([`display`]), the [`outcome`]s of each call;
//! - the synchronous [`Engine`] trait ([`engine`]) and the [`EngineHandle`] that holds one
//!   ([`handle`]), with the [`EngineOptions`] an engine is opened with ([`options`]) and the
//!   [`ReclaimCost`] a backend declares ([`cost`]);
//! - the one [`Error`] type ([`error`]) and the lock policy ([`sync`]);
//! - the shared watermark arithmetic ([`watermark`]), the statistics ([`stats`]) and the
//!   incremental covered-entry accounting behind [`Engine::reclaimable`] ([`covered`]);
//! - the offline consistency check ([`verify`]: [`VerifyReport`], [`Damage`], the `Verifier`
//!   backends feed) and the offset-index row format it checks ([`offset_index`]);
//! - the in-memory reference engine [`MemoryEngine`] ([`memory`]).
//!
//! The disk backends' shared machinery (the `DiskEngine` skeleton over `Storage` primitives, the
//! sweeper, layout, budgets, containment, fault injection) is the `tidemark-disk` crate; the
//! bucket layer, the lake lookuper and the reclaim scheduler live in the `tidemark-bucket` crate.

pub mod batch;
pub mod codec;
pub mod cost;
pub mod covered;
pub mod display;
pub mod engine;
pub mod error;
pub mod handle;
pub mod memory;
pub mod offset_index;
pub mod options;
pub mod outcome;
pub mod stats;
pub mod sync;
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
pub use stats::{CounterSnapshot, Covered, EngineCounters, EngineStats, Reclaimable};
pub use verify::{Damage, VerifyReport};
