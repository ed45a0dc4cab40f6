//! What sled keeps in its `meta` tree beyond the shared metadata: the live-entry count (and the
//! live-row digest, [`crate::digest`]).
//!
//! The format version, watermark and applied end are stored under
//! [`MetaKey::bytes`](tidemark_disk::MetaKey::bytes) in the shared encoding
//! ([`tidemark_disk::meta`]) and restored and checked by the skeleton.

use std::path::Path;

use sled::transaction::{ConflictableTransactionError, ConflictableTransactionResult};
use tidemark_disk::meta::encode_u64;
use tidemark_engine_api::{Error, Result};

use crate::error::sled_error;

/// Key of the number of rows in `data` (`u64` BE), kept exact by every transaction that adds or
/// removes a `data` row, so `stats()` never walks the tree (sled's `len` is O(table)).
pub(crate) const LIVE_ENTRIES: &[u8] = b"live_entries";

/// The persisted live-entry count, `None` when the store has none yet (older stores) or a
/// damaged one: the count is derived data, so the caller takes it from the rows it read at open.
pub(crate) fn restore_live(meta: &sled::Tree, path: &Path) -> Result<Option<u64>> {
    Ok(match meta.get(LIVE_ENTRIES).map_err(sled_error)? {
        Some(bytes) => match decode_live(&bytes) {
            Ok(count) => Some(count),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "recounting live entries");
                None
            }
        },
        None => None,
    })
}

/// Persists `count`, the rows of `data` counted at open (not flushed; the caller flushes).
pub(crate) fn persist_live(meta: &sled::Tree, count: u64) -> Result<()> {
    meta.insert(LIVE_ENTRIES, &encode_u64(count)[..])
        .map(drop)
        .map_err(sled_error)
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
        Some(bytes) => decode_live(&bytes).map_err(ConflictableTransactionError::Abort)?,
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
    meta.insert(LIVE_ENTRIES, &encode_u64(next.unwrap_or(0))[..])?;
    Ok(())
}

/// The stored count: exactly 8 bytes, big-endian (the shared metadata encoding).
fn decode_live(bytes: &[u8]) -> Result<u64> {
    <[u8; 8]>::try_from(bytes)
        .map(u64::from_be_bytes)
        .map_err(|_| {
            Error::corrupt(
                LIVE_ENTRIES,
                format!(
                    "meta entry is {} bytes, expected an 8-byte big-endian integer",
                    bytes.len()
                ),
            )
        })
}
