//! The offset index of the B-tree backends (sled, redb): beside each `data` row, an index row
//! whose key is `offset (u64 BE) ‖ key` and whose value is empty. The disk toolkit's sweeper
//! walks it and the [`Verifier`](crate::verify::Verifier) checks it against the data, so its
//! format is defined here once.

/// Builds the index key `offset BE ‖ key`.
pub fn index_key(offset: u64, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + key.len());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// Splits an index key into `(offset, key)`; `None` when it is shorter than 8 bytes.
pub fn parse_index_key(index_key: &[u8]) -> Option<(u64, &[u8])> {
    let (tag, key) = index_key.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*tag), key))
}

/// The exclusive upper bound of the index range covered by `threshold`: every index key with
/// `offset < threshold` sorts strictly below these 8 bytes.
pub fn index_upper_bound(threshold: u64) -> [u8; 8] {
    threshold.to_be_bytes()
}
