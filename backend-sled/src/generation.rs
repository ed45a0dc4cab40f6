//! Generations: which sled database of a bucket directory is the bucket's.
//!
//! A rebuild ([`crate::rebuild`]) copies a bucket into a fresh database beside the current one
//! and then switches to it. The switch must be atomic across a crash, so the bucket directory
//! names its current database in a small pointer file, written to a temporary name, synced and
//! renamed over the old one (and the directory synced): a crash leaves either the old pointer
//! (the old database is current, the half-built one is garbage) or the new one (the new database
//! was complete and flushed before the pointer was written). Whatever is not current is removed
//! at the next writable open, and after a switch as soon as nothing reads the old database.
//!
//! Generation 0 is the [`DB_SUBDIR`] directory, so a store that was never rebuilt has no pointer
//! file and the same layout as before generations existed; generation `n > 0` lives in
//! `sled.<n>`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tidemark_engine_api::{Error, Result};

use crate::error::sled_error;

/// Subdirectory of the bucket directory that holds sled's own files (the bucket directory itself
/// holds the Tidemark marker beside it).
pub const DB_SUBDIR: &str = "sled";

/// The file sled 0.34 keeps its log in, inside [`DB_SUBDIR`]: present in every sled database.
pub(crate) const SLED_DB_FILE: &str = "db";

/// sled's configuration of a bucket's database in `db_dir`, with a page cache of `cache_bytes`.
/// Built afresh for every database: sled panics when a path is set on a clone of a
/// configuration.
pub(crate) fn sled_config(db_dir: &Path, cache_bytes: u64) -> sled::Config {
    // No flusher thread per database: the context's one thread flushes every bucket.
    sled::Config::new()
        .path(db_dir)
        .cache_capacity(cache_bytes)
        .flush_every_ms(None)
}

/// The pointer file in the bucket directory: the current generation's number in decimal.
pub const GENERATION_FILE: &str = "sled.generation";

/// Where the next pointer is written before it is renamed over [`GENERATION_FILE`].
const GENERATION_TMP: &str = "sled.generation.tmp";

/// The longest pointer file accepted; anything longer is not one.
const MAX_POINTER_BYTES: u64 = 64;

/// The sled database directory of generation `number` inside the bucket directory `dir`.
pub(crate) fn db_dir(dir: &Path, number: u64) -> PathBuf {
    if number == 0 {
        dir.join(DB_SUBDIR)
    } else {
        dir.join(format!("{DB_SUBDIR}.{number}"))
    }
}

/// The generation number a directory name inside a bucket directory stands for, if it is one.
fn number_of(name: &str) -> Option<u64> {
    if name == DB_SUBDIR {
        return Some(0);
    }
    let digits = name.strip_prefix(DB_SUBDIR)?.strip_prefix('.')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The current generation of the bucket at `dir`: 0 without a pointer file; a pointer that is
/// not a number is [`Error::Damaged`] (only an outside writer or a damaged disk makes one).
pub(crate) fn current(dir: &Path) -> Result<u64> {
    let path = dir.join(GENERATION_FILE);
    let file = match fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::Io(e)),
    };
    let mut text = String::new();
    let damaged = |reason: String| Error::Damaged {
        path: path.clone(),
        reason,
    };
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_POINTER_BYTES + 1),
        &mut text,
    )
    .map_err(|e| damaged(format!("the sled generation pointer is unreadable: {e}")))?;
    let number = text
        .strip_suffix('\n')
        .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|digits| digits.parse::<u64>().ok())
        .ok_or_else(|| {
            damaged(format!(
                "the sled generation pointer should hold one decimal number and a newline, \
                 found {:?}",
                text.chars().take(32).collect::<String>()
            ))
        })?;
    Ok(number)
}

/// A failed [`publish`]: whether the pointer had been renamed into place when it failed.
#[derive(Debug)]
pub(crate) struct PublishError {
    /// `false`: the pointer still names the previous generation.
    pub(crate) renamed: bool,
    pub(crate) source: std::io::Error,
}

/// Makes generation `number` current, durably: the pointer is written to a temporary file,
/// synced, renamed over [`GENERATION_FILE`], and the directory synced.
pub(crate) fn publish(dir: &Path, number: u64) -> std::result::Result<(), PublishError> {
    let before = |source| PublishError {
        renamed: false,
        source,
    };
    let tmp = dir.join(GENERATION_TMP);
    let mut file = fs::File::create(&tmp).map_err(before)?;
    file.write_all(format!("{number}\n").as_bytes())
        .map_err(before)?;
    file.sync_all().map_err(before)?;
    drop(file);
    // A rename that reports an error may still have happened.
    let after = |source| PublishError {
        renamed: true,
        source,
    };
    fs::rename(&tmp, dir.join(GENERATION_FILE)).map_err(after)?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(after)
}

/// Syncs every file and directory under `db_dir` and the directory holding it, so a pointer
/// written next never names files a crash could lose.
pub(crate) fn sync_tree(db_dir: &Path) -> Result<()> {
    fn sync_dir(dir: &Path) -> std::io::Result<()> {
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                sync_dir(&entry.path())?;
            } else {
                fs::File::open(entry.path())?.sync_all()?;
            }
        }
        fs::File::open(dir)?.sync_all()
    }
    sync_dir(db_dir)?;
    if let Some(parent) = db_dir.parent() {
        fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Removes every generation directory of the bucket at `dir` except `keep`, and a pointer left
/// half written; returns how many directories it removed. Only what is not current is removed,
/// so a crash in here loses nothing.
pub(crate) fn remove_others(dir: &Path, keep: u64) -> Result<usize> {
    let mut removed = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name == GENERATION_TMP {
            fs::remove_file(entry.path())?;
            continue;
        }
        match number_of(name) {
            Some(number) if number != keep && entry.file_type()?.is_dir() => {
                fs::remove_dir_all(entry.path())?;
                removed += 1;
            }
            _ => {}
        }
    }
    Ok(removed)
}

/// One open sled database of a bucket and its three trees.
pub(crate) struct Generation {
    /// Its number (see [`db_dir`]).
    pub(crate) number: u64,
    /// Shared (weakly) with the context's flusher thread.
    pub(crate) db: Arc<sled::Db>,
    pub(crate) data: sled::Tree,
    pub(crate) by_offset: sled::Tree,
    pub(crate) meta: sled::Tree,
}

impl Generation {
    /// Opens the trees of `db`, generation `number`.
    pub(crate) fn new(number: u64, db: sled::Db) -> Result<Self> {
        let db = Arc::new(db);
        let tree = |name: &str| db.open_tree(name).map_err(sled_error);
        Ok(Generation {
            number,
            data: tree("data")?,
            by_offset: tree("by_offset")?,
            meta: tree("meta")?,
            db,
        })
    }

    /// sled's own figure for the bytes its files occupy.
    pub(crate) fn size_on_disk(&self) -> Result<u64> {
        self.db.size_on_disk().map_err(sled_error)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

    use super::*;

    #[test]
    fn directory_names_map_to_generations_and_nothing_else() {
        assert_eq!(number_of("sled"), Some(0));
        assert_eq!(number_of("sled.7"), Some(7));
        for other in [
            "sled.",
            "sled.x",
            "sled.-1",
            "sled.1.tmp",
            "sledge",
            "tidemark.marker",
        ] {
            assert_eq!(number_of(other), None, "{other}");
        }
        let dir = Path::new("/b");
        assert_eq!(db_dir(dir, 0), dir.join("sled"));
        assert_eq!(db_dir(dir, 12), dir.join("sled.12"));
    }

    #[test]
    fn the_pointer_round_trips_and_a_damaged_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(current(tmp.path()).unwrap(), 0);
        publish(tmp.path(), 3).unwrap();
        assert_eq!(current(tmp.path()).unwrap(), 3);
        assert!(!tmp.path().join(GENERATION_TMP).exists());
        for bad in ["", "3", "x\n", "3\n4\n", "18446744073709551616\n"] {
            fs::write(tmp.path().join(GENERATION_FILE), bad).unwrap();
            let err = current(tmp.path()).unwrap_err();
            assert!(matches!(err, Error::Damaged { .. }), "{bad:?}: {err}");
        }
        fs::write(tmp.path().join(GENERATION_FILE), vec![b'1'; 100]).unwrap();
        assert!(matches!(current(tmp.path()), Err(Error::Damaged { .. })));
    }

    #[test]
    fn only_the_kept_generation_survives_cleanup() {
        let tmp = tempfile::tempdir().unwrap();
        for name in ["sled", "sled.1", "sled.2", "other"] {
            fs::create_dir(tmp.path().join(name)).unwrap();
        }
        fs::write(tmp.path().join(GENERATION_TMP), "2\n").unwrap();
        fs::write(tmp.path().join("sled.9"), "a file, not a generation").unwrap();
        assert_eq!(remove_others(tmp.path(), 1).unwrap(), 2);
        let mut left: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["other", "sled.1", "sled.9"]);
    }
}
