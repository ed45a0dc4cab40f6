//! The stored value format, version 1, identical on every backend:
//!
//! ```text
//! byte 0      kind: 0x01 = value, 0x02 = tombstone
//! bytes 1..9  offset, u64 big-endian
//! bytes 9..   payload (values only; a tombstone is exactly 9 bytes)
//! ```
//!
//! Decoding never panics; anything else is [`Error::Corrupt`] naming the key.

use crate::error::{Error, Result};

/// Kind byte of a value.
pub const KIND_VALUE: u8 = 0x01;
/// Kind byte of a tombstone.
pub const KIND_TOMBSTONE: u8 = 0x02;
/// Length of the header (kind byte + offset tag).
pub const HEADER_LEN: usize = 9;
/// The stored value format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

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

/// Encodes a value tagged with `offset`.
pub fn encode_value(offset: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.push(KIND_VALUE);
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Encodes a tombstone tagged with `offset` (exactly 9 bytes).
pub fn encode_tombstone(offset: u64) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[0] = KIND_TOMBSTONE;
    out[1..].copy_from_slice(&offset.to_be_bytes());
    out
}

/// Reads only the offset tag (bytes 1..9) without validating the rest; `None` when too short.
///
/// Compaction filters use this: the tag is all a threshold needs. The kind byte is still checked
/// so that a value of an unknown format is never interpreted.
pub fn peek_tag(bytes: &[u8]) -> Option<u64> {
    match decode_raw(bytes) {
        Ok(d) => Some(d.offset()),
        Err(_) => None,
    }
}

/// Decodes stored bytes; `key` is only used to name the entry in the error.
pub fn decode<'a>(key: &[u8], bytes: &'a [u8]) -> Result<Decoded<'a>> {
    decode_raw(bytes).map_err(|reason| Error::corrupt(key, reason))
}

fn decode_raw(bytes: &[u8]) -> std::result::Result<Decoded<'_>, String> {
    let (&kind, rest) = bytes
        .split_first()
        .ok_or_else(|| "empty stored value".to_string())?;
    if kind != KIND_VALUE && kind != KIND_TOMBSTONE {
        return Err(format!("unknown kind byte 0x{kind:02x}"));
    }
    let Some((tag, payload)) = rest.split_first_chunk::<8>() else {
        return Err(format!(
            "stored value is {} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        ));
    };
    let offset = u64::from_be_bytes(*tag);
    if kind == KIND_TOMBSTONE {
        if !payload.is_empty() {
            return Err(format!("tombstone carries {} payload bytes", payload.len()));
        }
        Ok(Decoded::Tombstone { offset })
    } else {
        Ok(Decoded::Value { offset, payload })
    }
}

/// Renders a key for messages: UTF-8 when printable, hex otherwise, truncated when long.
pub fn display_key(key: &[u8]) -> String {
    const MAX: usize = 64;
    let shown = &key[..key.len().min(MAX)];
    let mut s = match std::str::from_utf8(shown) {
        Ok(text) if text.chars().all(|c| !c.is_control()) => format!("{text:?}"),
        _ => {
            let hex: String = shown.iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}")
        }
    };
    if key.len() > MAX {
        s.push_str(&format!("… ({} bytes)", key.len()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn value_layout_is_byte_exact() {
        let enc = encode_value(0x0102_0304_0506_0708, b"hi");
        assert_eq!(enc, [1, 1, 2, 3, 4, 5, 6, 7, 8, b'h', b'i']);
    }

    #[test]
    fn tombstone_is_nine_bytes() {
        let enc = encode_tombstone(7);
        assert_eq!(enc, [2, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(
            decode(b"k", &enc).unwrap(),
            Decoded::Tombstone { offset: 7 }
        );
    }

    #[test]
    fn empty_value_payload_round_trips() {
        let enc = encode_value(0, b"");
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
        assert_eq!(peek_tag(&[0x01, 0, 0]), None);
        assert_eq!(peek_tag(&[0x07, 0, 0, 0, 0, 0, 0, 0, 1]), None);
    }

    #[test]
    fn corrupt_error_names_the_key() {
        let err = decode(b"\x00\xff", b"").unwrap_err();
        assert!(err.to_string().contains("0x00ff"), "{err}");
    }

    proptest! {
        #[test]
        fn value_round_trip(offset in any::<u64>(), payload in proptest::collection::vec(any::<u8>(), 0..256)) {
            let enc = encode_value(offset, &payload);
            prop_assert_eq!(decode(b"k", &enc).unwrap(), Decoded::Value { offset, payload: &payload });
            prop_assert_eq!(peek_tag(&enc), Some(offset));
        }

        #[test]
        fn tombstone_round_trip(offset in any::<u64>()) {
            let enc = encode_tombstone(offset);
            prop_assert_eq!(decode(b"k", &enc).unwrap(), Decoded::Tombstone { offset });
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = decode(b"k", &bytes);
        }
    }
}
