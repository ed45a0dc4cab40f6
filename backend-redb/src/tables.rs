//! The three redb tables of a bucket and the encoding of the `meta` rows.
//!
//! `meta` values are stored as raw bytes (a `u64` big-endian) rather than as redb's typed `u64`,
//! so that a damaged row is reported as `Error::Corrupt` instead of tripping redb's fixed-width
//! decoding.

use redb::TableDefinition;

/// key → tagged value, exactly the bytes of the `tidemark_engine_api::codec` format.
pub(crate) const DATA: TableDefinition<&[u8], &[u8]> = TableDefinition::new("data");

/// `offset BE ‖ key` → nothing: the sweeper's offset-ordered index.
pub(crate) const BY_OFFSET: TableDefinition<&[u8], ()> = TableDefinition::new("by_offset");

/// Named `u64` metadata (watermark, applied end, format version), keyed by
/// [`MetaKey::name`](tidemark_disk::MetaKey::name) and encoded by `tidemark_disk::meta`.
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
