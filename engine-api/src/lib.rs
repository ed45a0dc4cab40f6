//! # Tidemark engine API
//!
//! The contract every Tidemark backend implements, and nothing else: it knows no storage engine
//! and no async runtime. The contract itself is `docs/DESIGN.md` at the root of the workspace
//! (section *Engine contract*); this crate is its code. Here:
//!
//! - the write and read types: [`WriteBatch`] and [`Record`] (with the limits a batch is held
//!   to), the stored value format ([`codec`]), how keys appear in messages ([`display_key`]),
//!   the outcome of each call ([`ApplyOutcome`], [`LocalLookup`], [`WatermarkUpdate`],
//!   [`ReclaimReport`]);
//! - the synchronous [`Engine`] trait and the [`EngineHandle`] that holds one, with the
//!   [`EngineOptions`] an engine is opened with and the [`ReclaimCost`] a backend declares;
//! - the one [`Error`] type and the lock policy ([`sync`]);
//! - the shared watermark arithmetic ([`watermark`]), the statistics ([`EngineStats`],
//!   [`CounterSnapshot`], [`Reclaimable`]) and the incremental covered-entry accounting behind
//!   [`Engine::reclaimable`] ([`covered`]);
//! - the offline consistency check: [`VerifyReport`], [`Damage`], and the [`Verifier`]
//!   backends feed;
//! - the in-memory reference engine [`MemoryEngine`].
//!
//! Its modules are private; what a user names is re-exported here, and four namespaces of
//! functions stay whole ([`codec`], [`covered`], [`sync`], [`watermark`]).
//!
//! The disk backends' shared machinery (the `DiskEngine` skeleton over `Storage` primitives, the
//! sweeper and its offset index, layout, budgets, containment, the fault layer) is the
//! `tidemark-disk` crate; the
//! bucket layer, the lake lookuper and the reclaim scheduler live in the `tidemark-bucket` crate.

mod batch;
mod cost;
mod display;
mod engine;
mod error;
mod handle;
mod memory;
mod options;
mod outcome;
mod stats;
mod verify;

// Namespaces of functions kept whole: the stored value format, the lock policy, the watermark
// arithmetic and the covered-entry accounting.
pub mod codec;
pub mod covered;
pub mod sync;
pub mod watermark;

pub use batch::{MAX_KEY_LEN, MAX_OFFSET, MAX_VALUE_LEN, Record, WriteBatch, validate_key};
pub use cost::ReclaimCost;
pub use display::display_key;
pub use engine::{Engine, OpenEngine};
pub use error::{BoxedSource, Error, Result};
pub use handle::EngineHandle;
pub use memory::MemoryEngine;
pub use options::{DEFAULT_SWEEP_CHUNK_TIME, EngineOptions, OpenMode};
pub use outcome::{ApplyOutcome, LocalLookup, ReclaimReport, WatermarkUpdate};
pub use stats::{CounterSnapshot, Covered, EngineCounters, EngineStats, Reclaimable};
pub use verify::{Damage, Example, Finding, MAX_EXAMPLES, Verifier, VerifyReport};
