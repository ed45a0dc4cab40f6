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
