//! # Tidemark fjall backend (in progress)
//!
//! fjall is a pure-Rust LSM tree. This crate holds, so far, its **tag-threshold compaction
//! filter** ([`TagThresholdFilterFactory`]): the disk toolkit's shared decision
//! ([`disk::compaction_policy::ThresholdPolicy`], the one RocksDB's filter applies) mapped to
//! fjall's [`Verdict`](fjall::compaction::filter::Verdict). The storage, the context and the
//! backend marker are not written yet.

mod compaction_filter;

pub use compaction_filter::{TagThresholdFilter, TagThresholdFilterFactory};
/// The shared tag-threshold decision's counters and supplier type (from the disk toolkit).
pub use disk::compaction_policy::{FilterCounterSnapshot, FilterCounters, ThresholdSupplier};
