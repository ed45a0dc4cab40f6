//! A manual compaction of one column family (or of one key range of it: a bucket's) down to the
//! bottom level that meets every table file existing when it starts exactly once (so the
//! compaction filter sees every entry once per call).
//!
//! One `compact_range` with `BottommostLevelCompaction::ForceOptimized` is meant to do that: it
//! compacts each level into the next, then the bottom level into itself, skipping the bottom files
//! this call has just written. RocksDB 10.4 can end that last step early, though: when a file the
//! call wrote sits, in key order, between older bottom files, the picker compacts the older files
//! before it and then takes the range as finished (`CompactionPicker::CompactRange` checks for
//! remaining older files in the already-shrunk input list), so the older files after it are never
//! compacted and the covered entries in them survive the reclaim. So after the call, every file
//! that existed before it and still exists (it was never compacted: a compaction consumes its
//! inputs) is compacted again with a `compact_range` over its key range, consecutive ones
//! together, until none is left.

use std::collections::{BTreeMap, HashSet};

use rocksdb::{BottommostLevelCompaction, ColumnFamily, CompactOptions, DB, LiveFile, properties};
use tidemark_engine_api::{Error, Result};

use crate::error::BACKEND;
use crate::rocks_err;

/// Targeted passes after the full `compact_range` before giving up on files it left behind. One
/// is enough unless concurrent flushes keep placing new files between the leftovers.
const MAX_EXTRA_PASSES: usize = 8;

/// Compacts the column family `cf` (named `cf_name`), or only its keys in `range` (`[start,
/// end)`), down to the bottom level; see the module docs. Fails if RocksDB reports a background
/// error meanwhile or files it should have compacted are still there after
/// [`MAX_EXTRA_PASSES`] targeted passes.
///
/// `merge_bottom` rewrites the bottom-level files of the range together, those the call itself
/// writes there included (`BottommostLevelCompaction::Force`): what merges a bucket's output with
/// the small neighbours [`widened_over_small_neighbours`] took in, which a plain call would leave
/// in files of their own (it moves the bucket's rows to the bottom level first, then compacts the
/// bottom files it did not write).
pub(crate) fn compact_to_bottom(
    db: &DB,
    cf: &ColumnFamily,
    cf_name: &str,
    range: Option<(&[u8], &[u8])>,
    merge_bottom: bool,
) -> Result<()> {
    let errors_before = background_errors(db)?;
    let files = || -> Result<Vec<LiveFile>> {
        let mut files = table_files(db, cf_name)?;
        if let Some((start, end)) = range {
            files.retain(|f| overlaps(f, start, end));
        }
        Ok(files)
    };
    let before: HashSet<String> = files()?.into_iter().map(|f| f.name).collect();
    match range {
        // RocksDB's range end is inclusive; the exclusive end is the next prefix, so at most
        // one key of the next range (its empty key) is compacted with it, which filters it
        // by its own bucket's rule like any compaction.
        Some((start, end)) => compact_range(db, cf, Some(start), Some(end), merge_bottom),
        None => compact_range(db, cf, None, None, merge_bottom),
    }
    let mut pass = 0;
    loop {
        check_errors(db, errors_before)?;
        let runs = unmet_runs(&files()?, &before);
        if runs.is_empty() {
            return Ok(());
        }
        if pass == MAX_EXTRA_PASSES {
            return Err(Error::backend(
                BACKEND,
                format!(
                    "{} key ranges of table files were never compacted after {pass} extra passes",
                    runs.len()
                ),
            ));
        }
        pass += 1;
        tracing::debug!(
            pass,
            ranges = runs.len(),
            "compacting table files the full compaction skipped"
        );
        for run in &runs {
            compact_range(db, cf, run.start.as_deref(), run.end.as_deref(), false);
        }
    }
}

/// A key range holding only table files of one level that the compaction has not met yet.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    /// Inclusive; `None`: unbounded.
    start: Option<Vec<u8>>,
    /// Inclusive; `None`: unbounded.
    end: Option<Vec<u8>>,
}

/// Groups the files of `files` named in `before` (so still not compacted) into key ranges of
/// consecutive such files per level, none containing a file created since (which a compaction of
/// the range would meet a second time).
fn unmet_runs(files: &[LiveFile], before: &HashSet<String>) -> Vec<Run> {
    let mut levels: BTreeMap<i32, Vec<&LiveFile>> = BTreeMap::new();
    for f in files {
        levels.entry(f.level).or_default().push(f);
    }
    let mut runs = Vec::new();
    for mut level in levels.into_values() {
        level.sort_by(|a, b| a.start_key.cmp(&b.start_key));
        let mut current: Option<Run> = None;
        for f in level {
            if !before.contains(&f.name) {
                runs.extend(current.take());
                continue;
            }
            match current.as_mut() {
                Some(run) => run.end.clone_from(&f.end_key),
                None => {
                    current = Some(Run {
                        start: f.start_key.clone(),
                        end: f.end_key.clone(),
                    });
                }
            }
        }
        runs.extend(current);
    }
    runs
}

/// Bottom-level table files smaller than this are merged into a neighbouring bucket's reclaim
/// ([`widened_over_small_neighbours`]). It bounds what a small bucket's reclaim rewrites besides
/// its own rows (128 KiB on average) against how many table files small buckets leave (one per
/// 256 KiB of them: 10,000 buckets of 12 KiB leave about 470). At 2 MiB, 10,000 such buckets took
/// minutes to open and reclaim, each reclaim rewriting a megabyte on average.
pub const SMALL_TABLE_BYTES: u64 = 256 << 10;

/// The range `[start, end)` widened over the bottom-level table files right before and right
/// after it when they are smaller than [`SMALL_TABLE_BYTES`].
///
/// A compaction of one bucket's key range writes its output into a table file of its own when
/// no bottom file overlaps the range, so without this an instance of thousands of small buckets
/// would keep a small table file per reclaimed bucket (a footer, an index and a filter each, and
/// a table-cache slot to read it). Taking the small neighbours in merges them, while a large
/// neighbour is left alone, so a reclaim never rewrites more than a few small files beside the
/// bucket's own.
pub(crate) fn widened_over_small_neighbours(
    files: &[LiveFile],
    start: Vec<u8>,
    end: Vec<u8>,
) -> (Vec<u8>, Vec<u8>) {
    let Some(bottom) = files.iter().map(|f| f.level).max() else {
        return (start, end);
    };
    let bottom: Vec<&LiveFile> = files.iter().filter(|f| f.level == bottom).collect();
    let small = |f: &&&LiveFile| (f.size as u64) < SMALL_TABLE_BYTES;
    let before = bottom
        .iter()
        .filter(|f| f.end_key.as_deref().is_some_and(|k| k < start.as_slice()))
        .max_by(|a, b| a.end_key.cmp(&b.end_key))
        .filter(small)
        .and_then(|f| f.start_key.clone());
    let after = bottom
        .iter()
        .filter(|f| f.start_key.as_deref().is_some_and(|k| k >= end.as_slice()))
        .min_by(|a, b| a.start_key.cmp(&b.start_key))
        .filter(small)
        .and_then(|f| f.end_key.clone())
        .map(|mut last| {
            // The first key past the file's last: the range's end is exclusive.
            last.push(0);
            last
        });
    (before.unwrap_or(start), after.unwrap_or(end))
}

/// Whether the table file `f` holds keys of `[start, end)`.
pub(crate) fn overlaps(f: &LiveFile, start: &[u8], end: &[u8]) -> bool {
    let starts_before_end = f.start_key.as_deref().is_none_or(|k| k < end);
    let ends_after_start = f.end_key.as_deref().is_none_or(|k| k >= start);
    starts_before_end && ends_after_start
}

/// The live table files of the column family named `cf_name`.
pub(crate) fn table_files(db: &DB, cf_name: &str) -> Result<Vec<LiveFile>> {
    let mut files = db.live_files().map_err(rocks_err)?;
    files.retain(|f| f.column_family_name == cf_name);
    Ok(files)
}

/// One `compact_range` over `[start, end]` (inclusive; `None`: unbounded), down to the bottom
/// level.
///
/// Not exclusive: an exclusive manual compaction holds off every background compaction of the
/// database for its whole run, so under sustained writes L0 would pile up into RocksDB's slowdown
/// and stop triggers and stall writers. Bottommost compaction is `ForceOptimized`: every bottom
/// file is filtered, but those this call just wrote there are not rewritten again; with `merge`,
/// `Force`: they are, together with the others of the range.
fn compact_range(
    db: &DB,
    cf: &ColumnFamily,
    start: Option<&[u8]>,
    end: Option<&[u8]>,
    merge: bool,
) {
    let mut opts = CompactOptions::default();
    opts.set_exclusive_manual_compaction(false);
    opts.set_bottommost_level_compaction(if merge {
        BottommostLevelCompaction::Force
    } else {
        BottommostLevelCompaction::ForceOptimized
    });
    db.compact_range_cf_opt(cf, start, end, &opts);
}

/// `compact_range` reports no status through the C API; background errors stand in for it.
fn check_errors(db: &DB, before: u64) -> Result<()> {
    let after = background_errors(db)?;
    if after > before {
        return Err(Error::backend(
            BACKEND,
            format!(
                "compaction failed ({} new background errors)",
                after - before
            ),
        ));
    }
    Ok(())
}

fn background_errors(db: &DB) -> Result<u64> {
    Ok(db
        .property_int_value(properties::BACKGROUND_ERRORS)
        .map_err(rocks_err)?
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, level: i32, start: &[u8], end: &[u8]) -> LiveFile {
        LiveFile {
            column_family_name: "data".into(),
            name: name.into(),
            size: 1,
            level,
            start_key: Some(start.to_vec()),
            end_key: Some(end.to_vec()),
            num_entries: 1,
            num_deletions: 0,
        }
    }

    fn run(start: &[u8], end: &[u8]) -> Run {
        Run {
            start: Some(start.to_vec()),
            end: Some(end.to_vec()),
        }
    }

    #[test]
    fn a_range_takes_in_its_small_bottom_neighbours_only() {
        let mut big = file("big", 6, b"k7", b"k8");
        big.size = SMALL_TABLE_BYTES as usize;
        let files = [
            file("far", 6, b"k0", b"k1"),
            file("before", 6, b"k2", b"k3"),
            file("l0", 0, b"k4", b"k4"),
            big,
        ];
        let (start, end) = widened_over_small_neighbours(&files, b"k4".to_vec(), b"k5".to_vec());
        assert_eq!((start.as_slice(), end.as_slice()), (&b"k2"[..], &b"k5"[..]));
        let (start, end) = widened_over_small_neighbours(&files, b"k81".to_vec(), b"k9".to_vec());
        assert_eq!(
            (start.as_slice(), end.as_slice()),
            (&b"k81"[..], &b"k9"[..])
        );
        let (start, end) =
            widened_over_small_neighbours(&files[..2], b"k11".to_vec(), b"k12".to_vec());
        assert_eq!(
            (start.as_slice(), end.as_slice()),
            (&b"k0"[..], &b"k3\0"[..])
        );
        assert_eq!(
            widened_over_small_neighbours(&[], b"a".to_vec(), b"b".to_vec()),
            (b"a".to_vec(), b"b".to_vec())
        );
    }

    #[test]
    fn a_file_overlaps_a_range_it_shares_a_key_with() {
        let f = file("a", 6, b"k2", b"k4");
        assert!(overlaps(&f, b"k0", b"k3"));
        assert!(overlaps(&f, b"k4", b"k5"));
        assert!(overlaps(&f, b"k0", b"k9"));
        assert!(!overlaps(&f, b"k0", b"k2"), "the end is exclusive");
        assert!(!overlaps(&f, b"k5", b"k9"));
    }

    #[test]
    fn runs_are_consecutive_old_files_per_level_split_by_new_ones() {
        let before: HashSet<String> = ["a", "c", "d", "f", "x"].map(String::from).into();
        let files = [
            file("d", 6, b"k4", b"k5"),
            file("new1", 6, b"k2", b"k3"),
            file("a", 6, b"k0", b"k1"),
            file("c", 6, b"k6", b"k7"),
            file("new2", 6, b"k8", b"k8"),
            file("f", 6, b"k9", b"k9"),
            file("x", 5, b"k1", b"k6"),
        ];
        assert_eq!(
            unmet_runs(&files, &before),
            vec![
                run(b"k1", b"k6"),
                run(b"k0", b"k1"),
                run(b"k4", b"k7"),
                run(b"k9", b"k9")
            ]
        );
        assert!(unmet_runs(&files[1..2], &before).is_empty());
    }
}
