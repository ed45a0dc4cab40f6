//! The `meta` tree: watermark, applied end, live-entry count and format version, big-endian.

use std::path::Path;

use engine_api::codec::FORMAT_VERSION;
use engine_api::{Error, Result};
use sled::transaction::{ConflictableTransactionError, ConflictableTransactionResult};

use crate::errors::sled_error;

/// Key of the persisted watermark (`u64` BE).
pub(crate) const WATERMARK: &[u8] = b"watermark";
/// Key of the persisted applied end (`u64` BE).
pub(crate) const APPLIED_END: &[u8] = b"applied_end";
/// Key of the number of rows in `data` (`u64` BE), kept exact by every transaction that adds or
/// removes a `data` row, so `stats()` never walks the tree (sled's `len` is O(table)).
pub(crate) const LIVE_ENTRIES: &[u8] = b"live_entries";
/// Key of the format version the store was written with (`u32` BE).
pub(crate) const FORMAT: &[u8] = b"format_version";

/// What `open` restores from `meta`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Restored {
    pub watermark: u64,
    pub applied_end: u64,
    /// `None` when the store has no (readable) count yet: the caller counts `data` once.
    pub live_entries: Option<u64>,
}

/// Checks (or, for a fresh store, writes) the format version and reads `W`, the applied end and
/// the live-entry count.
///
/// An unparsable watermark or applied end is [`Error::Corrupt`]; a version this build does not
/// know is [`Error::UnsupportedFormat`], so a newer build's store is never misread. The live count
/// is derived data: a damaged one is reported as missing, to be recounted.
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
    let live_entries = match meta.get(LIVE_ENTRIES).map_err(sled_error)? {
        Some(bytes) => match fixed::<8>(LIVE_ENTRIES, &bytes) {
            Ok(count) => Some(u64::from_be_bytes(count)),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "recounting live entries");
                None
            }
        },
        None => None,
    };
    Ok(Restored {
        watermark: read_u64(meta, WATERMARK)?.unwrap_or(0),
        applied_end: read_u64(meta, APPLIED_END)?.unwrap_or(0),
        live_entries,
    })
}

/// Inside a transaction: adds `added` and subtracts `removed` from the persisted live count.
///
/// The count is read inside the transaction, so concurrent applies and sweep chunks (serialised
/// by sled's transaction lock) never lose an update.
pub(crate) fn adjust_live(
    meta: &sled::transaction::TransactionalTree,
    added: u64,
    removed: u64,
) -> ConflictableTransactionResult<(), Error> {
    if added == removed {
        return Ok(());
    }
    let current = match meta.get(LIVE_ENTRIES)? {
        Some(bytes) => u64::from_be_bytes(
            fixed::<8>(LIVE_ENTRIES, &bytes).map_err(ConflictableTransactionError::Abort)?,
        ),
        // `open` always writes the count, so only an outside writer can have removed it.
        None => {
            return Err(ConflictableTransactionError::Abort(Error::corrupt(
                LIVE_ENTRIES,
                "the live-entry count disappeared from meta",
            )));
        }
    };
    let next = current.saturating_add(added).checked_sub(removed);
    if next.is_none() {
        // Only possible if something outside this engine removed data rows: keep going (the
        // count is a statistic; reclaiming matters more) and say so.
        tracing::warn!(
            current,
            added,
            removed,
            "live-entry count would go negative"
        );
    }
    meta.insert(LIVE_ENTRIES, &next.unwrap_or(0).to_be_bytes()[..])?;
    Ok(())
}

/// Reads a `u64` entry; `None` when absent.
fn read_u64(meta: &sled::Tree, key: &[u8]) -> Result<Option<u64>> {
    match meta.get(key).map_err(sled_error)? {
        Some(bytes) => Ok(Some(u64::from_be_bytes(fixed::<8>(key, &bytes)?))),
        None => Ok(None),
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
