//! Tidemark's Apache Iceberg lake: the lake table a host tiers its buckets' logs into, read
//! back by the lookuper a bucket falls back to on a local miss.
//!
//! - [`IcebergLake`] opens (or creates) an Iceberg table named in an Iceberg SQL catalog: an
//!   embedded SQLite file by default, PostgreSQL when several processes write the table
//!   ([`LakeConfig`]). Every commit is a compare-and-swap of the catalog's entry; a writer that
//!   loses reloads, merges and retries.
//! - [`TieringWriter`] writes buckets' WAL records as versioned rows `(bucket, key, offset,
//!   deleted, value)` into Parquet data files sorted by key, and commits one snapshot per commit
//!   whose summary property [`OFFSETS_PROPERTY`] (`fluss-offsets`) records each bucket's
//!   exclusive end offset. A restarted writer reads the committed ends from the table.
//! - [`IcebergLookuper`] is a [`LakeLookuper`](tidemark_bucket::LakeLookuper): it refreshes to a
//!   snapshot by sequence number, answers a key's newest version at or below it, and reads a
//!   batch of keys in one pass over the files Iceberg plans, touching only the pages whose key
//!   bounds and bloom filters admit one of them.
//! - [`IcebergLake::expire_snapshots`] and [`IcebergLake::compact`] are the table maintenance a
//!   lake runs, so lookups meet real expiry.
//!
//! What the format cannot do, and how the design works around it, is in `docs/DESIGN.md`
//! (§ The Iceberg lake).

mod catalog;
mod data_file_reader;
mod data_files;
mod durable;
mod error;
mod key_reads;
mod lake;
mod location;
mod lookuper;
mod maintenance;
mod offsets;
mod retry;
mod rows;
mod snapshots;
mod sql_catalog;
#[cfg(feature = "testing")]
pub mod test_servers;
#[cfg(test)]
mod testing;
mod warehouse;
mod writer;

pub use data_file_reader::DataFileReads;
pub use lake::{EMBEDDED_CATALOG_FILE, IcebergLake, LakeConfig};
pub use location::TableLocation;
pub use lookuper::{IcebergLookuper, LookuperCounters};
pub use maintenance::{Expiry, ORPHAN_AGE};
pub use offsets::OFFSETS_PROPERTY;
pub use writer::{LakeCommit, TieringWriter};
