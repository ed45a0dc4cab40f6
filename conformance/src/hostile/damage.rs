//! Damage done to one file of a store: the ways a disk, an operator or a bad copy breaks files.

use std::fs;
use std::path::{Path, PathBuf};

use engine_api::rng::SplitMix64;

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
