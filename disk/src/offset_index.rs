//! The offset index of the B-tree backends (sled, redb): beside each `data` row, an index row
//! whose key is `offset (u64 BE) ‖ key` and whose value is empty. The [`sweeper`](crate::sweeper)
//! walks it and [`VerifyIndex`] checks it against the data, so its format is defined here once.

use tidemark_engine_api::Damage;
use tidemark_engine_api::Verifier;
use tidemark_engine_api::codec;

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

/// The offset-index checks of [`Verifier`], for a storage that keeps the index.
pub trait VerifyIndex {
    /// [`Verifier::data_row`], then, for a row that decodes, checks that the offset index holds
    /// its row `tag BE ‖ key` (`has_index_row` looks it up).
    fn indexed_data_row<E>(
        &mut self,
        key: &[u8],
        stored: &[u8],
        has_index_row: impl FnOnce(&[u8]) -> Result<bool, E>,
    ) -> Result<(), E>;

    /// Checks every row of the offset index (its keys, in any order); `read` returns the data
    /// row a key names. A row whose data row is newer is stale (counted, not damage); one whose
    /// data row does not decode is left to [`Verifier::data_row`], which reports that row.
    fn index_rows<R, B, E>(
        &mut self,
        rows: impl IntoIterator<Item = Result<R, E>>,
        read: impl FnMut(&[u8]) -> Result<Option<B>, E>,
    ) -> Result<(), E>
    where
        R: AsRef<[u8]>,
        B: AsRef<[u8]>;
}

impl VerifyIndex for Verifier {
    fn indexed_data_row<E>(
        &mut self,
        key: &[u8],
        stored: &[u8],
        has_index_row: impl FnOnce(&[u8]) -> Result<bool, E>,
    ) -> Result<(), E> {
        if let Some(tag) = self.data_row(key, stored)
            && !has_index_row(&index_key(tag, key))?
        {
            let detail = format!("no index row at its tag {tag}");
            self.found(Damage::DataRowWithoutIndexRow, key, detail);
        }
        Ok(())
    }

    fn index_rows<R, B, E>(
        &mut self,
        rows: impl IntoIterator<Item = Result<R, E>>,
        mut read: impl FnMut(&[u8]) -> Result<Option<B>, E>,
    ) -> Result<(), E>
    where
        R: AsRef<[u8]>,
        B: AsRef<[u8]>,
    {
        let mut count = 0;
        for row in rows {
            let row = row?;
            let row = row.as_ref();
            count += 1;
            let Some((offset, key)) = parse_index_key(row) else {
                let detail = format!("{} bytes, shorter than the 8-byte offset", row.len());
                self.found(Damage::UnparsableIndexRow, row, detail);
                continue;
            };
            let current = read(key)?;
            let tag = match current.as_ref().map(|b| codec::decode(key, b.as_ref())) {
                None => {
                    let detail = format!("index row at offset {offset}; no data row");
                    self.found(Damage::IndexRowWithoutData, key, detail);
                    continue;
                }
                Some(Err(_)) => continue,
                Some(Ok(decoded)) => decoded.offset(),
            };
            if tag > offset {
                self.count_stale_index_row();
            } else if tag < offset {
                let detail = format!("index row at offset {offset}; the data row holds {tag}");
                self.found(Damage::IndexRowWithoutData, key, detail);
            }
        }
        self.count_index_rows(count);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::convert::Infallible;

    use super::*;
    use tidemark_engine_api::VerifyReport;

    fn data() -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut data = BTreeMap::new();
        data.insert(b"a".to_vec(), codec::encode_value(b"a", 1, b"x"));
        data.insert(b"b".to_vec(), codec::encode_tombstone(b"b", 4).to_vec());
        data
    }

    fn verify(
        data: &BTreeMap<Vec<u8>, Vec<u8>>,
        index: &[Vec<u8>],
        watermark: u64,
        applied_end: u64,
    ) -> VerifyReport {
        let mut v = Verifier::new("toy", watermark, applied_end);
        for (key, stored) in data {
            v.indexed_data_row(key, stored, |row| {
                Ok::<_, Infallible>(index.iter().any(|r| r == row))
            })
            .unwrap();
        }
        v.index_rows(index.iter().map(Ok::<_, Infallible>), |key| {
            Ok(data.get(key).cloned())
        })
        .unwrap();
        v.finish()
    }

    #[test]
    fn a_consistent_store_is_clean_and_counted() {
        let index = vec![index_key(0, b"a"), index_key(1, b"a"), index_key(4, b"b")];
        let r = verify(&data(), &index, 2, 5);
        assert!(r.is_clean(), "{r:?}");
        assert_eq!((r.values, r.tombstones, r.covered), (1, 1, 1));
        assert_eq!((r.index_rows, r.stale_index_rows), (Some(3), 1));
        assert!(!r.watermark_above_applied_end());
    }

    #[test]
    fn each_kind_of_damage_is_found_with_its_key() {
        let mut data = data();
        data.insert(b"bad".to_vec(), vec![0xee]);
        data.insert(b"future".to_vec(), codec::encode_value(b"future", 9, b""));
        data.insert(b"lost".to_vec(), codec::encode_value(b"lost", 2, b""));
        let index = vec![
            index_key(1, b"a"),
            index_key(4, b"b"),
            index_key(9, b"future"),
            index_key(3, b"ghost"),
            index_key(3, b"a"),
            vec![1, 2],
        ];
        let r = verify(&data, &index, 0, 5);
        let examples = |d: Damage| {
            let f = r
                .finding(d)
                .unwrap_or_else(|| panic!("{d:?} not found in {r:?}"));
            f.examples.iter().map(|e| e.key.clone()).collect::<Vec<_>>()
        };
        assert_eq!(examples(Damage::UndecodableValue), [b"bad".to_vec()]);
        assert_eq!(
            examples(Damage::TagAtOrAboveAppliedEnd),
            [b"future".to_vec()]
        );
        assert_eq!(examples(Damage::DataRowWithoutIndexRow), [b"lost".to_vec()]);
        assert_eq!(
            examples(Damage::IndexRowWithoutData),
            [b"ghost".to_vec(), b"a".to_vec()]
        );
        assert_eq!(examples(Damage::UnparsableIndexRow), [vec![1, 2]]);
        assert_eq!(r.damaged(), 6);
        assert_eq!(r.findings.len(), 5);
    }

    #[test]
    fn a_watermark_above_the_applied_end_is_reported_not_damage() {
        let r = verify(&data(), &[index_key(1, b"a"), index_key(4, b"b")], 9, 5);
        assert!(r.is_clean());
        assert!(r.watermark_above_applied_end());
        assert_eq!(r.covered, 2);
    }
}
