//! The metadata every disk backend persists beside its data, encoded one way for all of them:
//! each value a `u64` big-endian under a fixed name.

use std::path::Path;

use tidemark_engine_api::codec::FORMAT_VERSION;
use tidemark_engine_api::{Error, Result};

/// One persisted metadata value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaKey {
    /// The on-disk format version the store was created with.
    FormatVersion,
    /// The watermark `W`.
    Watermark,
    /// The applied end.
    AppliedEnd,
}

impl MetaKey {
    /// Every key, in a stable order.
    pub const ALL: [MetaKey; 3] = [
        MetaKey::FormatVersion,
        MetaKey::Watermark,
        MetaKey::AppliedEnd,
    ];

    /// The name the value is stored under (the same in every backend).
    pub fn name(self) -> &'static str {
        match self {
            MetaKey::FormatVersion => "format_version",
            MetaKey::Watermark => "watermark",
            MetaKey::AppliedEnd => "applied_end",
        }
    }

    /// [`Self::name`] as bytes, for backends whose metadata keys are byte strings.
    pub fn bytes(self) -> &'static [u8] {
        self.name().as_bytes()
    }
}

/// Encodes a metadata value.
pub fn encode_u64(value: u64) -> [u8; 8] {
    value.to_be_bytes()
}

/// Decodes the stored bytes of `key`; anything but exactly 8 bytes is [`Error::Corrupt`] naming
/// `meta/<name>`.
///
/// The format version alone also accepts 4 bytes: sled stores written before the backends shared
/// this codec stored it as a `u32`.
pub fn decode_u64(key: MetaKey, bytes: &[u8]) -> Result<u64> {
    if let Ok(raw) = <[u8; 8]>::try_from(bytes) {
        return Ok(u64::from_be_bytes(raw));
    }
    if key == MetaKey::FormatVersion
        && let Ok(raw) = <[u8; 4]>::try_from(bytes)
    {
        return Ok(u64::from(u32::from_be_bytes(raw)));
    }
    Err(Error::corrupt(
        format!("meta/{}", key.name()).as_bytes(),
        format!(
            "metadata value is {} bytes, expected an 8-byte big-endian integer",
            bytes.len()
        ),
    ))
}

/// What a disk engine restores from its metadata at open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoredMeta {
    /// The watermark (0 when never written).
    pub watermark: u64,
    /// The applied end (0 when never written).
    pub applied_end: u64,
    /// Whether the store was new: it held no metadata and no data, so the caller writes the
    /// format version.
    pub fresh: bool,
    /// The stored format version (0 for a new store); a writable open upgrades one below
    /// [`FORMAT_VERSION`].
    pub format: u64,
}

/// Checks the stored metadata of the store at `path`.
///
/// A format version this build does not know (0, or above [`FORMAT_VERSION`]) is
/// [`Error::UnsupportedFormat`], so a newer build's store is never misread; every version from
/// 1 up is read. A store with a watermark, an applied end or data rows but no format
/// version was damaged (or written by something else) and is [`Error::Corrupt`].
pub fn restore(
    path: &Path,
    format: Option<u64>,
    watermark: Option<u64>,
    applied_end: Option<u64>,
    holds_data: bool,
) -> Result<RestoredMeta> {
    let fresh = match format {
        Some(found) if found == 0 || found > u64::from(FORMAT_VERSION) => {
            return Err(Error::UnsupportedFormat {
                path: path.to_path_buf(),
                found: u32::try_from(found).unwrap_or(u32::MAX),
                supported: FORMAT_VERSION,
            });
        }
        Some(_) => false,
        None if watermark.is_none() && applied_end.is_none() && !holds_data => true,
        None => {
            return Err(Error::corrupt(
                format!("meta/{}", MetaKey::FormatVersion.name()).as_bytes(),
                "missing from a store that holds data or progress",
            ));
        }
    };
    Ok(RestoredMeta {
        watermark: watermark.unwrap_or(0),
        applied_end: applied_end.unwrap_or(0),
        fresh,
        format: format.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_bad_lengths_name_the_key() {
        for key in MetaKey::ALL {
            assert_eq!(decode_u64(key, &encode_u64(42)).ok(), Some(42));
        }
        let err = decode_u64(MetaKey::AppliedEnd, b"abc").err();
        assert!(
            err.as_ref()
                .is_some_and(|e| e.to_string().contains("meta/applied_end")),
            "{err:?}"
        );
        // Only the format version has a legacy 4-byte form.
        assert_eq!(
            decode_u64(MetaKey::FormatVersion, &1u32.to_be_bytes()).ok(),
            Some(1)
        );
        assert!(decode_u64(MetaKey::Watermark, &1u32.to_be_bytes()).is_err());
    }

    #[test]
    fn restore_tells_fresh_known_newer_and_damaged_stores_apart() {
        let p = Path::new("/x");
        assert!(restore(p, None, None, None, false).is_ok_and(|r| r.fresh));
        for format in [1, 2] {
            assert_eq!(
                restore(p, Some(format), Some(3), Some(5), true).ok(),
                Some(RestoredMeta {
                    watermark: 3,
                    applied_end: 5,
                    fresh: false,
                    format,
                })
            );
        }
        assert!(matches!(
            restore(p, Some(9), None, None, false),
            Err(Error::UnsupportedFormat { found: 9, .. })
        ));
        assert!(matches!(
            restore(p, Some(0), None, None, false),
            Err(Error::UnsupportedFormat { found: 0, .. })
        ));
        for (w, end, data) in [
            (Some(1), None, false),
            (None, Some(1), false),
            (None, None, true),
        ] {
            assert!(matches!(
                restore(p, None, w, end, data),
                Err(Error::Corrupt { .. })
            ));
        }
    }
}
