//! # Tidemark
//!
//! Incremental, lake-driven reclamation of per-bucket local key-value state. Values and
//! tombstones are tagged with the WAL offset that wrote them; each bucket keeps a monotonic,
//! persisted watermark fed by the lake's confirmed progress, and everything below it is reclaimed
//! incrementally — by a compaction filter on RocksDB, by a range-scan sweeper on sled and redb —
//! while lookups fall back to the lake only on a true local miss.
//!
//! This facade re-exports the engine API and one backend per cargo feature (`sled`, `redb`,
//! `rocksdb`, all on by default), and lets programs choose among the compiled-in backends at
//! run time with [`Backend`].

pub mod backend;
pub mod demo;

pub use backend::Backend;
pub use engine_api::*;

/// The sled backend.
#[cfg(feature = "sled")]
pub use backend_sled as sled;

/// The redb backend.
#[cfg(feature = "redb")]
pub use backend_redb as redb;

/// The RocksDB backend.
#[cfg(feature = "rocksdb")]
pub use backend_rocksdb as rocksdb;
