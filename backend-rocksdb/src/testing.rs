//! Damage on disk, for tests of `verify`'s checksum check (cargo feature `testing`).

use std::path::{Path, PathBuf};

use tidemark_engine_api::{Error, Result};

use tidemark_disk::layout::shared::shared_dir_of;

use crate::error::BACKEND;
use crate::instance::SHARED_DIR;

/// Inverts 16 bytes a quarter into the largest table file of the shared instance of the closed
/// bucket at `bucket_dir` and returns that file. With the `data` column family compacted into one table of
/// incompressible values, that is inside a data block, far from the index and the footer, so the
/// store still opens and reading the block fails its checksum.
pub fn damage_a_data_block(bucket_dir: &Path) -> Result<PathBuf> {
    let mut largest: Option<(u64, PathBuf)> = None;
    for entry in std::fs::read_dir(shared_dir_of(bucket_dir, SHARED_DIR, BACKEND)?)? {
        let path = entry?.path();
        let len = std::fs::metadata(&path)?.len();
        if path.extension().is_some_and(|x| x == "sst")
            && largest.as_ref().is_none_or(|l| len > l.0)
        {
            largest = Some((len, path));
        }
    }
    let (_, table) = largest.ok_or_else(|| Error::invalid("the store has no table file"))?;
    let mut bytes = std::fs::read(&table)?;
    let at = bytes.len() / 4;
    let Some(block) = bytes.get_mut(at..at + 16) else {
        return Err(Error::invalid("the table file is too small to damage"));
    };
    for b in block {
        *b ^= 0xff;
    }
    std::fs::write(&table, &bytes)?;
    Ok(table)
}
