//! Damage done to one file of a store: the ways a disk, an operator or a bad copy breaks files.

use std::fs;
use std::path::{Path, PathBuf};

use tidemark_test_support::rng::SplitMix64;

/// One kind of damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// The file (or directory) is removed.
    Delete,
    /// The file is cut to zero bytes.
    TruncateEmpty,
    /// The file is cut to half its length.
    TruncateHalf,
    /// Every byte is overwritten with zero (same length).
    Zero,
    /// Eight bytes anywhere in the file are overwritten with random ones.
    Overwrite,
    /// Eight bytes within the last 4 KiB are overwritten with random ones (the newest part of a
    /// log).
    OverwriteTail,
}

impl Damage {
    /// Every kind, in a stable order.
    pub const ALL: [Damage; 6] = [
        Damage::Delete,
        Damage::TruncateEmpty,
        Damage::TruncateHalf,
        Damage::Zero,
        Damage::Overwrite,
        Damage::OverwriteTail,
    ];

    /// The kinds that apply to a directory (only removal).
    pub fn applies_to_dirs(self) -> bool {
        self == Damage::Delete
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Damage::Delete => "delete",
            Damage::TruncateEmpty => "truncate-empty",
            Damage::TruncateHalf => "truncate-half",
            Damage::Zero => "zero",
            Damage::Overwrite => "overwrite",
            Damage::OverwriteTail => "overwrite-tail",
        }
    }

    /// Does the damage to `path`, random bytes and positions drawn from `rng`.
    pub fn apply(self, path: &Path, rng: &mut SplitMix64) -> std::io::Result<()> {
        if path.is_dir() {
            return fs::remove_dir_all(path);
        }
        let mut bytes = fs::read(path)?;
        match self {
            Damage::Delete => return fs::remove_file(path),
            Damage::TruncateEmpty => bytes.clear(),
            Damage::TruncateHalf => bytes.truncate(bytes.len() / 2),
            Damage::Zero => bytes.fill(0),
            Damage::Overwrite | Damage::OverwriteTail => {
                let len = bytes.len() as u64;
                let from = if self == Damage::OverwriteTail {
                    len.saturating_sub(4096)
                } else {
                    0
                };
                for _ in 0..8 {
                    if len > from {
                        let at = (from + rng.below(len - from)) as usize;
                        // Never a no-op: the new byte differs from the old one.
                        bytes[at] ^= 1 + (rng.below(255) as u8);
                    }
                }
            }
        }
        fs::write(path, bytes)
    }
}

/// `count` positions spread evenly over `len` bytes: one drawn from `rng` in each of `count`
/// equal strides (every position once when `len <= count`), in increasing order.
pub fn spread_positions(len: u64, count: u64, rng: &mut SplitMix64) -> Vec<u64> {
    if len <= count {
        return (0..len).collect();
    }
    (0..count)
        .map(|i| {
            let (from, to) = (i * len / count, (i + 1) * len / count);
            from + rng.below(to - from)
        })
        .collect()
}

/// Flips bits of the byte at `at` in the file `path`: it is XORed with `mask` (never 0, so the
/// byte always changes).
pub fn flip_byte(path: &Path, at: u64, mask: u8) -> std::io::Result<()> {
    assert_ne!(mask, 0, "a flip must change the byte");
    let mut bytes = fs::read(path)?;
    let byte = usize::try_from(at)
        .ok()
        .and_then(|at| bytes.get_mut(at))
        .ok_or_else(|| std::io::Error::other(format!("{at} is past the end of the file")))?;
    *byte ^= mask;
    fs::write(path, bytes)
}

/// The files of a store as one run of bytes (in [`store_entries`] order), for damage spread
/// over all of them.
#[derive(Debug, Clone)]
pub struct FileBytes {
    /// Each file, relative to the store, with its length.
    files: Vec<(PathBuf, u64)>,
}

impl FileBytes {
    /// The files under `dir` as they are now.
    pub fn of(dir: &Path) -> Self {
        let files = store_entries(dir)
            .into_iter()
            .filter(|(_, is_dir)| !is_dir)
            .map(|(rel, _)| {
                let len = fs::metadata(dir.join(&rel)).unwrap().len();
                (rel, len)
            })
            .collect();
        FileBytes { files }
    }

    /// The bytes of all the files together.
    pub fn len(&self) -> u64 {
        self.files.iter().map(|(_, len)| len).sum()
    }

    /// Whether there is no byte at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file holding byte `at` of the run, and the position within it.
    pub fn locate(&self, at: u64) -> (&Path, u64) {
        let mut within = at;
        for (rel, len) in &self.files {
            if within < *len {
                return (rel, within);
            }
            within -= len;
        }
        panic!("byte {at} is past the {} bytes of the store", self.len())
    }
}

/// Every file and directory under `dir`, relative to it, sorted (lock and temporary files
/// included: whatever the backend keeps is fair game).
pub fn store_entries(dir: &Path) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            let is_dir = path.is_dir();
            if is_dir {
                pending.push(path.clone());
            }
            out.push((path.strip_prefix(dir).unwrap().to_path_buf(), is_dir));
        }
    }
    out.sort();
    out
}

/// Copies the directory tree `from` to `to` (which must not exist).
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for (rel, is_dir) in store_entries(from) {
        if is_dir {
            fs::create_dir_all(to.join(&rel)).unwrap();
        } else {
            fs::copy(from.join(&rel), to.join(&rel)).unwrap();
        }
    }
}
