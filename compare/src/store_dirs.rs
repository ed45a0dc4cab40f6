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

/// What the files under a directory take: their lengths, and the blocks the file system gave
/// them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeBytes {
    /// The sum of the files' lengths (as the backends measure their own bytes).
    pub length: u64,
    /// The bytes of the blocks allocated to them (`st_blocks × 512`): what the disk gives up. A
    /// preallocated sparse file (fjall's 64 MiB journals) is long but takes almost nothing; a
    /// file of a few bytes takes a whole block.
    pub allocated: u64,
}

/// Bytes of every file under `dir`, the engines' shared instances included. A file or
/// directory that goes away while it is counted (a compaction's input, a rebuilt database)
/// counts as gone.
pub fn tree_bytes(dir: &Path) -> Result<TreeBytes> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if gone(&e) => return Ok(TreeBytes::default()),
        Err(e) => return Err(Error::io("cannot list", dir, e)),
    };
    let mut total = TreeBytes::default();
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
        let below = if meta.is_dir() {
            tree_bytes(&path)?
        } else if meta.is_file() {
            TreeBytes {
                length: meta.len(),
                allocated: allocated(&meta),
            }
        } else {
            TreeBytes::default()
        };
        total.length = total.length.saturating_add(below.length);
        total.allocated = total.allocated.saturating_add(below.allocated);
    }
    Ok(total)
}

#[cfg(unix)]
fn allocated(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.blocks().saturating_mul(512)
}

/// Without block counts, the length stands in.
#[cfg(not(unix))]
fn allocated(meta: &std::fs::Metadata) -> u64 {
    meta.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_bytes_counts_every_file_below_and_nothing_for_a_missing_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        assert_eq!(tree_bytes(&root).unwrap(), TreeBytes::default());
        std::fs::create_dir_all(root.join("a/.shared")).unwrap();
        // Not zeros: a file system that compresses may store an all-zero file as a hole.
        std::fs::write(root.join("top"), [7u8; 10]).unwrap();
        std::fs::write(root.join("a/file"), [7u8; 100]).unwrap();
        std::fs::write(root.join("a/.shared/table"), [7u8; 1_000]).unwrap();
        let bytes = tree_bytes(&root).unwrap();
        assert_eq!(bytes.length, 1_110);
        // Three files with data take at least a block each.
        assert!(bytes.allocated >= 3 * 512, "{bytes:?}");
    }

    #[cfg(unix)]
    #[test]
    fn a_sparse_file_is_long_but_takes_almost_no_blocks() {
        let tmp = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(tmp.path().join("preallocated")).unwrap();
        file.set_len(64 << 20).unwrap();
        let bytes = tree_bytes(tmp.path()).unwrap();
        assert_eq!(bytes.length, 64 << 20);
        assert!(bytes.allocated < 1 << 20, "{bytes:?}");
    }
}
