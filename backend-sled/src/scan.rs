//! Reading a sled tree in chunks, with no iterator alive while the caller works on a chunk.
//!
//! Why: a sled 0.34 iterator holds a shared guard on sled's process-wide transaction lock
//! while it lives, and that lock is fair: once a transaction (any bucket's commit) waits for
//! it, a second shared acquisition on the same thread blocks behind the transaction, which
//! waits for the first guard. Any sled call made while an iterator is alive can therefore
//! deadlock the process. Copying and checking rows call sled for every row they read, so they
//! read a chunk, drop the iterator, and only then work on it.

use std::ops::Bound;

use sled::IVec;
use tidemark_engine_api::Result;

use crate::error::sled_error;

/// Rows read per chunk.
const CHUNK_ROWS: usize = 256;

/// Calls `f` with every row of `tree` whose key is at or above `from` (and below `until`, when
/// given), in key order, a chunk at a time; no iterator of `tree` is alive while `f` runs.
pub(crate) fn for_each_chunk(
    tree: &sled::Tree,
    from: &[u8],
    until: Option<&[u8]>,
    mut f: impl FnMut(&[(IVec, IVec)]) -> Result<()>,
) -> Result<()> {
    let mut lower: Bound<IVec> = Bound::Included(IVec::from(from));
    let upper: Bound<IVec> = until.map_or(Bound::Unbounded, |u| Bound::Excluded(IVec::from(u)));
    loop {
        let chunk = tree
            .range::<IVec, _>((lower.clone(), upper.clone()))
            .take(CHUNK_ROWS)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(sled_error)?;
        let Some((last, _)) = chunk.last() else {
            return Ok(());
        };
        lower = Bound::Excluded(last.clone());
        f(&chunk)?;
        if chunk.len() < CHUNK_ROWS {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

    use super::*;

    #[test]
    fn every_row_from_the_bound_is_met_once_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(tmp.path()).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        for i in 0u32..1_000 {
            tree.insert(i.to_be_bytes(), &[][..]).unwrap();
        }
        let mut seen = Vec::new();
        for_each_chunk(&tree, &10u32.to_be_bytes(), None, |chunk| {
            assert!(chunk.len() <= CHUNK_ROWS);
            // No iterator is alive: writing the tree from here cannot deadlock.
            tree.insert(b"zz", &[][..]).unwrap();
            seen.extend(chunk.iter().map(|(k, _)| k.clone()));
            Ok(())
        })
        .unwrap();
        let expected: Vec<IVec> = (10u32..1_000)
            .map(|i| IVec::from(&i.to_be_bytes()[..]))
            .chain([IVec::from(&b"zz"[..])])
            .collect();
        assert_eq!(seen, expected);

        let mut bounded = 0;
        for_each_chunk(
            &tree,
            &10u32.to_be_bytes(),
            Some(&600u32.to_be_bytes()),
            |chunk| {
                bounded += chunk.len();
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(bounded, 590);
    }
}
