//! Where a comparison keeps its stores: each run's store directory, the lake table's beside it,
//! and their removal.

use std::path::{Path, PathBuf};

use tidemark::Backend;

use crate::config::Variant;
use crate::{Error, Result};

/// The store directory of one run.
pub fn run_dir(root: &Path, backend: Backend, variant: Variant) -> PathBuf {
    root.join(format!("{backend}-{variant}"))
}

/// The lake table's directory of the run whose store is `run_dir` (beside it: an all-or-nothing
/// rebuild removes the store's directory, not the lake).
pub fn lake_dir(run_dir: &Path) -> PathBuf {
    run_dir.with_extension("lake")
}

/// Removes a store's directory; one that was never created (the memory backend keeps none) is
/// already gone.
pub fn remove_store(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io("cannot remove the store", dir, e))
        }
        _ => Ok(()),
    }
}

/// The root of a `--buckets` run: every bucket directory of the backend's run is a child of it,
/// and so are the engine instances its buckets share.
pub fn buckets_root(root: &Path, backend: Backend) -> PathBuf {
    root.join(format!("{backend}-buckets"))
}

/// Bytes of every file under `dir` (their lengths, as the backends measure theirs), the engines'
/// shared instances included. A file or directory that goes away while it is counted (a
/// compaction's input, a rebuilt database) counts as gone.
pub fn tree_bytes(dir: &Path) -> Result<u64> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if gone(&e) => return Ok(0),
        Err(e) => return Err(Error::io("cannot list", dir, e)),
    };
    let mut total = 0u64;
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(Error::io("cannot list", dir, e)),
        };
        let path = entry.path();
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(Error::io("cannot read the metadata of", path, e)),
        };
        total = total.saturating_add(if meta.is_dir() {
            tree_bytes(&path)?
        } else if meta.is_file() {
            meta.len()
        } else {
            0
        });
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_bytes_counts_every_file_below_and_nothing_for_a_missing_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        assert_eq!(tree_bytes(&root).unwrap(), 0);
        std::fs::create_dir_all(root.join("a/.shared")).unwrap();
        std::fs::write(root.join("top"), [0u8; 10]).unwrap();
        std::fs::write(root.join("a/file"), [0u8; 100]).unwrap();
        std::fs::write(root.join("a/.shared/table"), [0u8; 1_000]).unwrap();
        assert_eq!(tree_bytes(&root).unwrap(), 1_110);
    }
}
