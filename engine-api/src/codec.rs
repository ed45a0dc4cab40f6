//! The stored value format, identical on every backend. Format version 2 is written; version 1
//! is still read (a store keeps the entries an older build wrote):
//!
//! ```text
//! version 2 (written)                          version 1 (read only)
//! byte 0       kind: 0xa5 value, 0x5a tombstone byte 0     kind: 0x01 value, 0x02 tombstone
//! bytes 1..9   offset, u64 big-endian           bytes 1..9  offset, u64 big-endian
//! bytes 9..13  CRC-32 of key ‖ bytes 0..9 ‖ payload, u32 big-endian
//! bytes 13..   payload (values only)            bytes 9..   payload (values only)
//! ```
//!
//! The checksum covers the key, so bytes damaged anywhere in the entry, or a value that ended up
//! under another key, fail to decode instead of being served. Decoding never panics; anything
//! else is [`Error::Corrupt`] naming the key.

pub use crate::display::display_key;
use crate::error::{Error, Result};

/// Kind byte of a version-1 value (no checksum; still read, never written).
pub const KIND_VALUE: u8 = 0x01;
/// Kind byte of a version-1 tombstone (no checksum; still read, never written).
pub const KIND_TOMBSTONE: u8 = 0x02;
/// Kind byte of a checksummed (version-2) value. The version-2 kinds differ from the version-1
/// kinds in at least three bits, so a bit or two flipped in the kind byte never turns a
/// checksummed entry into an unchecked one that would decode.
pub const KIND_VALUE_CHECKED: u8 = 0xa5;
/// Kind byte of a checksummed (version-2) tombstone (see [`KIND_VALUE_CHECKED`]).
pub const KIND_TOMBSTONE_CHECKED: u8 = 0x5a;
/// Length of the version-1 header (kind byte + offset tag).
pub const HEADER_LEN_V1: usize = 9;
/// Length of the header this build writes (kind byte + offset tag + checksum); a tombstone is
/// exactly this long.
pub const HEADER_LEN: usize = 13;
/// The stored value format version this build writes.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest format version this build still reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;

/// A decoded stored entry, borrowing its payload from the encoded bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A value written at `offset`.
    Value {
        /// WAL offset that wrote it.
        offset: u64,
        /// The user payload.
        payload: &'a [u8],
    },
    /// A tombstone written at `offset`.
    Tombstone {
        /// WAL offset that wrote it.
        offset: u64,
    },
}

impl Decoded<'_> {
    /// The WAL offset tag.
    pub fn offset(&self) -> u64 {
        match self {
            Decoded::Value { offset, .. } | Decoded::Tombstone { offset } => *offset,
        }
    }

    /// Whether this entry is a tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Decoded::Tombstone { .. })
    }
}

/// Encodes a value of `key` tagged with `offset` (format version 2).
pub fn encode_value(key: &[u8], offset: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.push(KIND_VALUE_CHECKED);
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&checksum(key, &out, payload).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Encodes a tombstone of `key` tagged with `offset` (format version 2, exactly
/// [`HEADER_LEN`] bytes).
pub fn encode_tombstone(key: &[u8], offset: u64) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[0] = KIND_TOMBSTONE_CHECKED;
    out[1..HEADER_LEN_V1].copy_from_slice(&offset.to_be_bytes());
    let sum = checksum(key, &out[..HEADER_LEN_V1], &[]);
    out[HEADER_LEN_V1..].copy_from_slice(&sum.to_be_bytes());
    out
}

/// Encodes a value in format version 1 (no checksum), as an older build wrote it. This build
/// never stores it; tests and tools use it to produce such entries.
pub fn encode_value_v1(offset: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN_V1 + payload.len());
    out.push(KIND_VALUE);
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Encodes a tombstone in format version 1 (exactly 9 bytes); see [`encode_value_v1`].
pub fn encode_tombstone_v1(offset: u64) -> [u8; HEADER_LEN_V1] {
    let mut out = [0u8; HEADER_LEN_V1];
    out[0] = KIND_TOMBSTONE;
    out[1..].copy_from_slice(&offset.to_be_bytes());
    out
}

/// The CRC-32 of `key ‖ header ‖ payload`, `header` being the kind byte and the offset tag.
fn checksum(key: &[u8], header: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(key);
    hasher.update(header);
    hasher.update(payload);
    hasher.finalize()
}

/// Reads only the offset tag (bytes 1..9) of a known kind, without checking the rest (not even
/// the checksum); `None` when too short or of an unknown kind.
///
/// For callers that have no key at hand; reclamation decides with [`checked_tag`] instead, so an
/// entry whose checksum fails is kept, not removed on a damaged tag.
pub fn peek_tag(bytes: &[u8]) -> Option<u64> {
    match bytes.first() {
        Some(&(KIND_VALUE | KIND_TOMBSTONE | KIND_VALUE_CHECKED | KIND_TOMBSTONE_CHECKED)) => bytes
            .get(1..HEADER_LEN_V1)
            .and_then(|tag| <[u8; 8]>::try_from(tag).ok())
            .map(u64::from_be_bytes),
        _ => None,
    }
}

/// The offset tag of a fully decodable entry of `key` (checksum verified); `None` when it does
/// not decode. What compaction filters decide with.
pub fn checked_tag(key: &[u8], bytes: &[u8]) -> Option<u64> {
    decode_raw(key, bytes).ok().map(|d| d.offset())
}

/// Whether `bytes` carry a tombstone's kind byte (either format version).
pub fn is_tombstone_kind(bytes: &[u8]) -> bool {
    matches!(
        bytes.first(),
        Some(&(KIND_TOMBSTONE | KIND_TOMBSTONE_CHECKED))
    )
}

/// Decodes the stored bytes of `key` (the checksum covers the key); `key` also names the entry
/// in the error.
pub fn decode<'a>(key: &[u8], bytes: &'a [u8]) -> Result<Decoded<'a>> {
    decode_raw(key, bytes).map_err(|reason| Error::corrupt(key, reason))
}

/// [`decode`], then refuses an entry tagged at or above `applied_end`: the store's own progress
/// says no such write was ever applied, so the entry is damaged (or not the store's), and is
/// [`Error::Corrupt`] rather than served. What lookups decode with.
pub fn decode_applied<'a>(key: &[u8], bytes: &'a [u8], applied_end: u64) -> Result<Decoded<'a>> {
    let decoded = decode(key, bytes)?;
    if decoded.offset() >= applied_end {
        return Err(Error::corrupt(
            key,
            format!(
                "tagged with offset {}, at or above the applied end {applied_end}: a write \
                 the store never applied",
                decoded.offset()
            ),
        ));
    }
    Ok(decoded)
}

fn decode_raw<'a>(key: &[u8], bytes: &'a [u8]) -> std::result::Result<Decoded<'a>, String> {
    let (&kind, rest) = bytes
        .split_first()
        .ok_or_else(|| "empty stored value".to_string())?;
    let (checked, tombstone) = match kind {
        KIND_VALUE => (false, false),
        KIND_TOMBSTONE => (false, true),
        KIND_VALUE_CHECKED => (true, false),
        KIND_TOMBSTONE_CHECKED => (true, true),
        _ => return Err(format!("unknown kind byte 0x{kind:02x}")),
    };
    let header_len = if checked { HEADER_LEN } else { HEADER_LEN_V1 };
    let Some((tag, rest)) = rest.split_first_chunk::<8>() else {
        return Err(shorter(bytes.len(), header_len));
    };
    let payload = if checked {
        let Some((stored_sum, payload)) = rest.split_first_chunk::<4>() else {
            return Err(shorter(bytes.len(), header_len));
        };
        let stored_sum = u32::from_be_bytes(*stored_sum);
        let computed = checksum(key, &bytes[..HEADER_LEN_V1], payload);
        if stored_sum != computed {
            return Err(format!(
                "checksum mismatch (stored 0x{stored_sum:08x}, computed 0x{computed:08x}): \
                 the entry was damaged"
            ));
        }
        payload
    } else {
        rest
    };
    let offset = u64::from_be_bytes(*tag);
    if tombstone {
        if !payload.is_empty() {
            return Err(format!("tombstone carries {} payload bytes", payload.len()));
        }
        Ok(Decoded::Tombstone { offset })
    } else {
        Ok(Decoded::Value { offset, payload })
    }
}

fn shorter(len: usize, header_len: usize) -> String {
    format!("stored value is {len} bytes, shorter than the {header_len}-byte header")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn value_layout_is_byte_exact() {
        let enc = encode_value(b"k", 0x0102_0304_0506_0708, b"hi");
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(b"k");
        hasher.update(&[0xa5, 1, 2, 3, 4, 5, 6, 7, 8]);
        hasher.update(b"hi");
        let sum = hasher.finalize().to_be_bytes();
        let mut expected = vec![0xa5, 1, 2, 3, 4, 5, 6, 7, 8];
        expected.extend_from_slice(&sum);
        expected.extend_from_slice(b"hi");
        assert_eq!(enc, expected);
        assert_eq!(
            encode_value_v1(0x0102_0304_0506_0708, b"hi"),
            [1, 1, 2, 3, 4, 5, 6, 7, 8, b'h', b'i']
        );
    }

    #[test]
    fn tombstone_is_a_header() {
        let enc = encode_tombstone(b"k", 7);
        assert_eq!(enc.len(), HEADER_LEN);
        assert_eq!(enc[..9], [0x5a, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(
            decode(b"k", &enc).unwrap(),
            Decoded::Tombstone { offset: 7 }
        );
        assert!(is_tombstone_kind(&enc));
        assert!(!is_tombstone_kind(&encode_value(b"k", 7, b"")));
    }

    #[test]
    fn version_1_entries_still_decode() {
        let enc = encode_tombstone_v1(7);
        assert_eq!(enc, [2, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(
            decode(b"k", &enc).unwrap(),
            Decoded::Tombstone { offset: 7 }
        );
        assert!(is_tombstone_kind(&enc));
        let enc = encode_value_v1(3, b"old");
        assert_eq!(
            decode(b"any", &enc).unwrap(),
            Decoded::Value {
                offset: 3,
                payload: b"old"
            }
        );
        assert_eq!(checked_tag(b"any", &enc), Some(3));
    }

    #[test]
    fn empty_value_payload_round_trips() {
        let enc = encode_value(b"k", 0, b"");
        assert_eq!(enc.len(), HEADER_LEN);
        assert_eq!(
            decode(b"k", &enc).unwrap(),
            Decoded::Value {
                offset: 0,
                payload: b""
            }
        );
    }

    fn assert_corrupt(bytes: &[u8], needle: &str) {
        match decode(b"the-key", bytes) {
            Err(Error::Corrupt { key, reason }) => {
                assert_eq!(key, b"the-key");
                assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn garbage_is_corrupt_not_panic() {
        assert_corrupt(b"", "empty");
        assert_corrupt(&[0x03, 0, 0, 0, 0, 0, 0, 0, 0], "unknown kind");
        assert_corrupt(&[0x00], "unknown kind");
        assert_corrupt(&[0x01, 0, 0, 0], "shorter");
        assert_corrupt(&[0x02, 0, 0, 0, 0, 0, 0, 0], "shorter");
        assert_corrupt(&[0x02, 0, 0, 0, 0, 0, 0, 0, 1, 9], "tombstone carries 1");
        assert_corrupt(&[0xa5, 0, 0, 0, 0, 0, 0, 0, 1, 9], "13-byte header");
        assert_eq!(peek_tag(&[0x01, 0, 0]), None);
        assert_eq!(peek_tag(&[0x07, 0, 0, 0, 0, 0, 0, 0, 1]), None);
    }

    #[test]
    fn a_flipped_bit_or_another_key_fails_the_checksum() {
        let enc = encode_value(b"the-key", 5, b"payload");
        for byte in 0..enc.len() {
            for bit in 0..8 {
                let mut bad = enc.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    decode(b"the-key", &bad).is_err(),
                    "flip of bit {bit} of byte {byte} decoded"
                );
                assert_eq!(checked_tag(b"the-key", &bad), None);
            }
        }
        // Two bits flipped in the kind byte still leave an unknown kind.
        for a in 0..8 {
            for b in 0..8 {
                for kind in [KIND_VALUE_CHECKED, KIND_TOMBSTONE_CHECKED] {
                    let flipped = kind ^ (1 << a) ^ (1 << b);
                    assert!(![KIND_VALUE, KIND_TOMBSTONE].contains(&flipped));
                }
            }
        }
        assert_corrupt(&encode_value(b"other", 5, b"payload"), "checksum mismatch");
        assert_corrupt(&encode_tombstone(b"other", 5), "checksum mismatch");
        let mut fat = encode_tombstone(b"the-key", 5).to_vec();
        fat.push(0);
        assert_corrupt(&fat, "checksum mismatch");
    }

    #[test]
    fn lookups_refuse_tags_at_or_above_the_applied_end() {
        let enc = encode_value(b"k", 5, b"x");
        assert!(decode_applied(b"k", &enc, 6).is_ok());
        for end in [0, 5] {
            let err = decode_applied(b"k", &enc, end).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
            assert!(err.to_string().contains("applied end"), "{err}");
        }
    }

    #[test]
    fn corrupt_error_names_the_key() {
        let err = decode(b"\x00\xff", b"").unwrap_err();
        assert!(err.to_string().contains("0x00ff"), "{err}");
    }

    proptest! {
        #[test]
        fn value_round_trip(key in proptest::collection::vec(any::<u8>(), 1..16), offset in any::<u64>(), payload in proptest::collection::vec(any::<u8>(), 0..256)) {
            let enc = encode_value(&key, offset, &payload);
            prop_assert_eq!(decode(&key, &enc).unwrap(), Decoded::Value { offset, payload: &payload });
            prop_assert_eq!(peek_tag(&enc), Some(offset));
            prop_assert_eq!(checked_tag(&key, &enc), Some(offset));
        }

        #[test]
        fn tombstone_round_trip(offset in any::<u64>()) {
            let enc = encode_tombstone(b"k", offset);
            prop_assert_eq!(decode(b"k", &enc).unwrap(), Decoded::Tombstone { offset });
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = decode(b"k", &bytes);
        }
    }
}
