//! The `meta` column family: the watermark, the applied end and the format version, each a
//! `u64` big-endian under a fixed key.

use engine_api::{Error, Result};

/// Key of the persisted watermark `W`.
pub const WATERMARK: &[u8] = b"watermark";
/// Key of the persisted applied end.
pub const APPLIED_END: &[u8] = b"applied_end";
/// Key of the on-disk format version.
pub const FORMAT_VERSION: &[u8] = b"format_version";

/// Encodes a metadata value.
pub fn encode(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

/// Decodes a metadata value; anything but exactly 8 bytes is [`Error::Corrupt`] naming the key.
pub fn decode(key: &[u8], bytes: Option<&[u8]>) -> Result<Option<u64>> {
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    let raw: [u8; 8] = bytes.try_into().map_err(|_| {
        Error::corrupt(
            key,
            format!("metadata value is {} bytes, expected 8", bytes.len()),
        )
    })?;
    Ok(Some(u64::from_be_bytes(raw)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        assert_eq!(decode(WATERMARK, Some(&encode(42))).unwrap(), Some(42));
        assert_eq!(decode(WATERMARK, None).unwrap(), None);
        let err = decode(APPLIED_END, Some(b"abc")).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("applied_end"), "{err}");
    }
}
