//! Small helpers shared by the cases.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Range;
use std::path::{Path, PathBuf};

use tidemark_engine_api::{ApplyOutcome, Engine, LocalLookup, Record, WriteBatch};
pub use tidemark_test_support::rng::SplitMix64;

/// `LocalLookup::Value`.
pub fn value(offset: u64, bytes: impl Into<Vec<u8>>) -> LocalLookup {
    LocalLookup::Value {
        offset,
        bytes: bytes.into(),
    }
}

/// `LocalLookup::Tombstone`.
pub fn tombstone(offset: u64) -> LocalLookup {
    LocalLookup::Tombstone { offset }
}

/// Looks `key` up and asserts the result.
#[track_caller]
pub fn assert_lookup<E: Engine + ?Sized>(engine: &E, key: &[u8], expected: &LocalLookup) {
    let got = engine
        .lookup(key)
        .unwrap_or_else(|e| panic!("lookup {key:?}: {e}"));
    assert_eq!(&got, expected, "lookup of key {key:?}");
}

/// Asserts that `text` (`what` it is: a message, a reason) mentions `needle`.
#[track_caller]
pub fn assert_mentions(what: &str, text: &str, needle: &str) {
    assert!(
        text.contains(needle),
        "{what} {text:?} does not mention {needle:?}"
    );
}

/// A batch from records.
pub fn batch(records: impl IntoIterator<Item = Record>) -> WriteBatch {
    records.into_iter().collect()
}

/// Applies one batch of `records`, which must succeed, and returns its outcome.
#[track_caller]
pub fn apply<E: Engine + ?Sized>(
    engine: &E,
    records: impl IntoIterator<Item = Record>,
) -> ApplyOutcome {
    engine
        .apply(&batch(records))
        .unwrap_or_else(|e| panic!("apply: {e}"))
}

/// Applies one batch that puts `key(i)` = `payload(i, i)` at offset `i` for every `i` in `range`.
#[track_caller]
pub fn fill<E: Engine + ?Sized>(engine: &E, range: Range<u64>) {
    apply(engine, range.map(|i| Record::put(key(i), payload(i, i), i)));
}

/// The key `k<i>`.
pub fn key(i: u64) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

/// A payload that names its key and offset, so a stale value is recognisable.
pub fn payload(i: u64, offset: u64) -> Vec<u8> {
    format!("v{i}@{offset}").into_bytes()
}

/// Deterministic, incompressible bytes.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    SplitMix64::new(seed).bytes(len)
}

/// Every file under `dir` with its length and a hash of its contents, sorted by path (empty when
/// `dir` is absent): what a test compares to show that nothing was written.
pub fn file_snapshot(dir: &Path) -> Vec<(PathBuf, u64, u64)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.push((path.clone(), 0, 0));
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let mut hasher = DefaultHasher::new();
                bytes.hash(&mut hasher);
                out.push((path, bytes.len() as u64, hasher.finish()));
            }
        }
    }
    out.sort();
    out
}
