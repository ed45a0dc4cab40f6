//! The live-row digest: a checksum of everything `data` holds, kept in `meta` in the same
//! transaction as the rows, so a store whose rows are not the ones its metadata was written with
//! is refused instead of served.
//!
//! Why: sled 0.34's recovery skips the rest of a log segment at a damaged message (or a whole
//! segment at a damaged header) when the segment is older than its log's tail, silently. Pages
//! whose newest versions lived there come back older, or not at all, while `meta` (written by
//! every commit, so always in the tail) still holds the newest `W` and applied end: every entry
//! then decodes, every tag is below the applied end, and the high-water record is satisfied, yet
//! keys answer older versions. The digest is written by the same commits as `meta`, so it
//! describes the newest rows; the rows sled actually restored are hashed at open and compared.
//!
//! The digest is the wrapping sum of [`row_hash`] over every `(key, stored value)` row of `data`:
//! a commit adds the hash of each new row and subtracts that of the row it replaces (sled's
//! transactional `insert` returns it, the same read that keeps the live-entry count), a sweep
//! chunk subtracts what it removes. The row is stamped with the applied end and the live-entry
//! count it was written with: both change with every commit and every sweep chunk that removes a
//! row, so a digest an older build (without it) left behind while it wrote is recognised as
//! stale, not as damage, and recomputed.

use sled::transaction::{
    ConflictableTransactionError, ConflictableTransactionResult, TransactionalTree,
};
use tidemark_disk::MetaKey;
use tidemark_disk::meta::encode_u64;
use tidemark_engine_api::Verifier;
use tidemark_engine_api::{Damage, Error, Result};

use crate::error::sled_error;
use crate::meta::LIVE_ENTRIES;

/// Key of the digest row in `meta`: digest, applied end and live-entry count, each a `u64`
/// big-endian (24 bytes).
pub(crate) const LIVE_DIGEST: &[u8] = b"live_digest";

/// The hash of one `data` row: its key and its stored bytes (which carry the entry's offset, so
/// an older version of a key hashes differently from its newest one), each with its length so
/// where one ends is part of the input.
///
/// The bytes are taken eight at a time (little-endian, the last word zero-padded): each word is
/// XORed into the state, which is multiplied by an odd constant and XOR-shifted. For a given
/// word every step is a bijection of the state, so two rows that differ in one word always hash
/// apart; SplitMix64's finaliser then spreads every bit over the whole hash, so a sum of hashes
/// is as good as its parts. A word at a time rather than a byte (FNV-1a): this runs over every
/// row at every open, and per byte the hashing took as long as sled reading the rows.
pub(crate) fn row_hash(key: &[u8], stored: &[u8]) -> u64 {
    let h = absorb(0x243f_6a88_85a3_08d3 ^ key.len() as u64, key);
    let h = absorb(step(h, stored.len() as u64), stored);
    let h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// One step of [`row_hash`]: `word` into `h`.
fn step(h: u64, word: u64) -> u64 {
    let h = (h ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 32)
}

/// Every byte of `bytes` into `h`, eight at a time.
fn absorb(h: u64, bytes: &[u8]) -> u64 {
    bytes.chunks(8).fold(h, |h, chunk| {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        step(h, u64::from_le_bytes(word))
    })
}

/// A change to the digest: rows added and rows removed (commutes, so the order rows are met in
/// does not matter).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delta(u64);

impl Delta {
    /// The row `(key, stored)` is now in `data`.
    pub(crate) fn add(&mut self, key: &[u8], stored: &[u8]) {
        self.0 = self.0.wrapping_add(row_hash(key, stored));
    }

    /// The row `(key, stored)` is no longer in `data`.
    pub(crate) fn remove(&mut self, key: &[u8], stored: &[u8]) {
        self.0 = self.0.wrapping_sub(row_hash(key, stored));
    }

    /// The digest of a table that started empty and changed by this delta.
    pub(crate) fn total(self) -> u64 {
        self.0
    }
}

/// The digest and row count of every row of `data`: what the rows sled restored add up to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scan {
    /// The wrapping sum of [`row_hash`] over the rows.
    pub(crate) digest: u64,
    /// How many rows.
    pub(crate) rows: u64,
}

impl Scan {
    /// Adds one row.
    pub(crate) fn row(&mut self, key: &[u8], stored: &[u8]) {
        self.digest = self.digest.wrapping_add(row_hash(key, stored));
        self.rows += 1;
    }
}

/// Reads every row of `data` (O(table): at open, and in `verify`).
pub(crate) fn scan(data: &sled::Tree) -> Result<Scan> {
    let mut scan = Scan::default();
    for row in data.iter() {
        let (key, stored) = row.map_err(sled_error)?;
        scan.row(&key, &stored);
    }
    Ok(scan)
}

/// The digest row: the digest of `data` when the applied end and the live-entry count were
/// `applied_end` and `live_entries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub(crate) digest: u64,
    pub(crate) applied_end: u64,
    pub(crate) live_entries: u64,
}

impl Recorded {
    fn encode(self) -> [u8; 24] {
        let mut out = [0; 24];
        out[..8].copy_from_slice(&encode_u64(self.digest));
        out[8..16].copy_from_slice(&encode_u64(self.applied_end));
        out[16..].copy_from_slice(&encode_u64(self.live_entries));
        out
    }

    /// Exactly 24 bytes; anything else is [`Error::Corrupt`] naming the row (only a writer
    /// other than this engine can produce it, and a digest that cannot be read protects
    /// nothing).
    fn decode(bytes: &[u8]) -> Result<Self> {
        let word = |i: usize| -> Option<u64> {
            let chunk = bytes.get(i * 8..i * 8 + 8)?;
            Some(u64::from_be_bytes(chunk.try_into().ok()?))
        };
        match (bytes.len(), word(0), word(1), word(2)) {
            (24, Some(digest), Some(applied_end), Some(live_entries)) => Ok(Recorded {
                digest,
                applied_end,
                live_entries,
            }),
            _ => Err(Error::corrupt(
                LIVE_DIGEST,
                format!(
                    "meta entry is {} bytes, expected a 24-byte digest, applied end and count",
                    bytes.len()
                ),
            )),
        }
    }
}

/// What the store's `meta` says about the digest at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restored {
    /// A digest kept by every commit since it was written: the rows must add up to it.
    Current(u64),
    /// No digest row (a store written before it existed), or one stamped with another applied
    /// end or live-entry count than `meta` holds (a build without it wrote since): it says
    /// nothing about the rows.
    Missing,
}

/// A `meta` value the digest is stamped with, as a number: absent is 0 (a store nothing was
/// committed to has no applied end yet), anything but 8 bytes `None`.
fn stamp_value(bytes: Option<&[u8]>) -> Option<u64> {
    match bytes {
        None => Some(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes).ok().map(u64::from_be_bytes),
    }
}

/// The applied end and live-entry count `meta` holds now (through `get`, a plain or a
/// transactional read), `None` when one of them is malformed.
fn current_stamp<E>(
    get: impl Fn(&[u8]) -> std::result::Result<Option<sled::IVec>, E>,
) -> std::result::Result<Option<(u64, u64)>, E> {
    let applied_end = stamp_value(get(MetaKey::AppliedEnd.bytes())?.as_deref());
    let live_entries = stamp_value(get(LIVE_ENTRIES)?.as_deref());
    Ok(applied_end.zip(live_entries))
}

/// The error for a stamp `meta` cannot provide: only an outside writer makes one malformed.
fn malformed_stamp() -> Error {
    Error::corrupt(
        LIVE_DIGEST,
        "the applied end or the live-entry count the digest is stamped with is malformed",
    )
}

/// Reads the digest row and tells whether it describes the current rows: its stamp must equal
/// the applied end and the live-entry count `meta` holds.
pub(crate) fn restore(meta: &sled::Tree) -> Result<Restored> {
    let Some(bytes) = meta.get(LIVE_DIGEST).map_err(sled_error)? else {
        return Ok(Restored::Missing);
    };
    let recorded = Recorded::decode(&bytes)?;
    let stamp = current_stamp(|key| meta.get(key)).map_err(sled_error)?;
    Ok(
        if stamp == Some((recorded.applied_end, recorded.live_entries)) {
            Restored::Current(recorded.digest)
        } else {
            Restored::Missing
        },
    )
}

/// Writes the digest of `scan`, stamped with the applied end and live-entry count `meta` holds
/// (not flushed; the caller flushes). Only at a writable open, once the metadata has passed the
/// open-time check and the live-entry count is written, before anything else can write.
pub(crate) fn persist(meta: &sled::Tree, scan: Scan) -> Result<()> {
    let (applied_end, live_entries) = current_stamp(|key| meta.get(key))
        .map_err(sled_error)?
        .ok_or_else(malformed_stamp)?;
    let recorded = Recorded {
        digest: scan.digest,
        applied_end,
        live_entries,
    };
    meta.insert(LIVE_DIGEST, &recorded.encode()[..])
        .map(drop)
        .map_err(sled_error)
}

/// Inside a commit or sweep transaction, after it wrote the applied end and the live-entry
/// count: adds `delta` to the digest and stamps it with both.
pub(crate) fn apply(
    meta: &TransactionalTree,
    delta: Delta,
) -> ConflictableTransactionResult<(), Error> {
    let abort = ConflictableTransactionError::Abort;
    let Some(bytes) = meta.get(LIVE_DIGEST)? else {
        // `open` always writes it on a writable store, so only an outside writer can have
        // removed it.
        return Err(abort(Error::corrupt(
            LIVE_DIGEST,
            "the live-row digest disappeared from meta",
        )));
    };
    let recorded = Recorded::decode(&bytes).map_err(abort)?;
    let (applied_end, live_entries) =
        current_stamp(|key| meta.get(key))?.ok_or_else(|| abort(malformed_stamp()))?;
    let next = Recorded {
        digest: recorded.digest.wrapping_add(delta.0),
        applied_end,
        live_entries,
    };
    meta.insert(LIVE_DIGEST, &next.encode()[..])?;
    Ok(())
}

/// Feeds `verifier` the digest check: the rows read add up to `found` (over `rows` rows) where
/// the store's metadata row recorded `recorded`; a difference is
/// [`Damage::DigestMismatch`](tidemark_engine_api::Damage::DigestMismatch), named after the row.
pub(crate) fn verify(verifier: &mut Verifier, recorded: u64, found: u64, rows: u64) {
    const CHECK: &str = "live-row digest (every data row)";
    verifier.engine_check(CHECK);
    if recorded != found {
        let detail = format!(
            "{CHECK}: the {rows} rows read hash to {found:016x}, the store recorded \
             {recorded:016x}: rows older than the metadata, missing or extra"
        );
        verifier.found(Damage::DigestMismatch, LIVE_DIGEST, detail);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

    use super::*;

    #[test]
    fn a_digest_that_differs_is_damage_named_after_its_row() {
        let mut v = Verifier::new("toy", 0, 1);
        verify(&mut v, 7, 7, 2);
        let r = v.finish();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(r.engine_checks, ["live-row digest (every data row)"]);
        let mut v = Verifier::new("toy", 0, 1);
        verify(&mut v, 7, 8, 2);
        let r = v.finish();
        let f = r.finding(Damage::DigestMismatch).unwrap();
        assert_eq!((f.count, f.examples[0].key.as_slice()), (1, LIVE_DIGEST));
        assert!(f.examples[0].detail.contains("the 2 rows read"), "{f:?}");
    }

    #[test]
    fn a_row_hash_depends_on_the_key_the_bytes_and_where_the_key_ends() {
        let h = row_hash(b"key", b"value");
        assert_eq!(h, row_hash(b"key", b"value"));
        assert_ne!(h, row_hash(b"kez", b"value"));
        assert_ne!(h, row_hash(b"key", b"valud"));
        assert_ne!(h, row_hash(b"ke", b"yvalue"));
        assert_ne!(row_hash(b"k", b""), row_hash(b"k", b"\0"));
        assert_ne!(row_hash(b"", b"12345678"), row_hash(b"12345678", b""));
    }

    #[test]
    fn row_hashes_spread_over_all_bits() {
        // Versions of one key a byte apart: each output bit flips about half the time.
        let hashes: Vec<u64> = (0u64..4096)
            .map(|offset| row_hash(b"key", &offset.to_be_bytes()))
            .collect();
        for bit in 0..64 {
            let ones = hashes.iter().filter(|h| *h >> bit & 1 == 1).count();
            assert!((1700..2400).contains(&ones), "bit {bit}: {ones} of 4096");
        }
        let mut sorted = hashes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), hashes.len());
    }

    #[test]
    fn a_delta_undoes_itself_and_commutes() {
        let mut scan = Scan::default();
        scan.row(b"a", b"1");
        scan.row(b"b", b"2");
        let mut delta = Delta::default();
        delta.remove(b"a", b"1");
        delta.add(b"a", b"one");
        delta.add(b"c", b"3");
        let mut after = Scan::default();
        after.row(b"c", b"3");
        after.row(b"b", b"2");
        after.row(b"a", b"one");
        assert_eq!(scan.digest.wrapping_add(delta.0), after.digest);
    }

    #[test]
    fn the_row_round_trips_and_other_lengths_are_corrupt() {
        let r = Recorded {
            digest: u64::MAX,
            applied_end: 7,
            live_entries: 3,
        };
        assert_eq!(Recorded::decode(&r.encode()).unwrap(), r);
        for len in [0, 8, 23, 25] {
            let err = Recorded::decode(&vec![0; len]).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        }
    }
}
