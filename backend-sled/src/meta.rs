//! The `meta` tree: watermark, applied end and format version, stored big-endian.

use std::path::Path;

use engine_api::codec::FORMAT_VERSION;
use engine_api::{Error, Result};

use crate::errors::sled_error;

/// Key of the persisted watermark (`u64` BE).
pub(crate) const WATERMARK: &[u8] = b"watermark";
/// Key of the persisted applied end (`u64` BE).
pub(crate) const APPLIED_END: &[u8] = b"applied_end";
/// Key of the format version the store was written with (`u32` BE).
pub(crate) const FORMAT: &[u8] = b"format_version";

/// What `open` restores from `meta`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Restored {
    pub watermark: u64,
    pub applied_end: u64,
}

/// Checks (or, for a fresh store, writes) the format version and reads `W` and the applied end.
///
/// An unparsable entry is [`Error::Corrupt`]; a version this build does not know is
/// [`Error::UnsupportedFormat`], so a newer build's store is never misread.
pub(crate) fn restore(meta: &sled::Tree, path: &Path) -> Result<Restored> {
    match meta.get(FORMAT).map_err(sled_error)? {
        Some(bytes) => {
            let found = u32::from_be_bytes(fixed::<4>(FORMAT, &bytes)?);
            if found == 0 || found > FORMAT_VERSION {
                return Err(Error::UnsupportedFormat {
                    path: path.to_path_buf(),
                    found,
                    supported: FORMAT_VERSION,
                });
            }
        }
        None => {
            meta.insert(FORMAT, &FORMAT_VERSION.to_be_bytes())
                .map_err(sled_error)?;
        }
    }
    Ok(Restored {
        watermark: read_u64(meta, WATERMARK)?,
        applied_end: read_u64(meta, APPLIED_END)?,
    })
}

/// Reads a `u64` entry, 0 when absent.
fn read_u64(meta: &sled::Tree, key: &[u8]) -> Result<u64> {
    match meta.get(key).map_err(sled_error)? {
        Some(bytes) => Ok(u64::from_be_bytes(fixed::<8>(key, &bytes)?)),
        None => Ok(0),
    }
}

fn fixed<const N: usize>(key: &[u8], bytes: &[u8]) -> Result<[u8; N]> {
    <[u8; N]>::try_from(bytes).map_err(|_| {
        Error::corrupt(
            key,
            format!(
                "meta entry is {} bytes, expected a {N}-byte big-endian integer",
                bytes.len()
            ),
        )
    })
}
