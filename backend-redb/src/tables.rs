//! The three redb tables of a bucket and the encoding of the `meta` rows.
//!
//! `meta` values are stored as raw bytes (a `u64` big-endian) rather than as redb's typed `u64`,
//! so that a damaged row is reported as [`Error::Corrupt`] instead of tripping redb's fixed-width
//! decoding.

use engine_api::Error;
use redb::TableDefinition;

/// key → tagged value, exactly the bytes of the `engine_api::codec` format.
pub(crate) const DATA: TableDefinition<&[u8], &[u8]> = TableDefinition::new("data");

/// `offset BE ‖ key` → nothing: the sweeper's offset-ordered index.
pub(crate) const BY_OFFSET: TableDefinition<&[u8], ()> = TableDefinition::new("by_offset");

/// Named `u64` metadata (watermark, applied end, format version).
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// `meta` key of the persisted watermark `W`.
pub(crate) const META_WATERMARK: &str = "watermark";
/// `meta` key of the persisted applied end.
pub(crate) const META_APPLIED_END: &str = "applied_end";
/// `meta` key of the on-disk format version.
pub(crate) const META_FORMAT: &str = "format_version";

/// Encodes a `meta` value.
pub(crate) fn encode_u64(value: u64) -> [u8; 8] {
    value.to_be_bytes()
}

/// Decodes a `meta` value; anything but exactly 8 bytes is corrupt.
pub(crate) fn decode_u64(name: &str, bytes: &[u8]) -> engine_api::Result<u64> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| {
        Error::corrupt(
            format!("meta/{name}").as_bytes(),
            format!("metadata value is {} bytes, expected 8", bytes.len()),
        )
    })?;
    Ok(u64::from_be_bytes(array))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_rejects_bad_lengths() {
        assert_eq!(decode_u64("w", &encode_u64(42)).unwrap(), 42);
        let err = decode_u64("watermark", &[1, 2, 3]).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }));
        assert!(err.to_string().contains("meta/watermark"), "{err}");
    }
}
