//! The crash test's lake: a [`MemoryLake`] whose committed snapshots persist in a file of the
//! test's directory, so a child killed mid-flight leaves behind exactly the commits that
//! returned.
//!
//! The lake's data is the stream itself (what the tiering service reads from the host's WAL,
//! which is deterministic here), so only the commit list needs persisting: one line per snapshot
//! end, appended and synced before the commit is reported. On open the lake is rebuilt by
//! appending the stream and committing each persisted end in order; a torn last line (a kill
//! during the append) is a commit that never returned and is ignored.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tidemark_bucket::lake::{LakeSnapshot, MemoryLake};

use super::{batch_at, to_write_batch};

/// The lake and its commit log.
pub struct PersistedLake {
    lake: Arc<MemoryLake>,
    log: File,
    seed: u64,
}

impl PersistedLake {
    /// Rebuilds the lake from the commit log at `dir/lake-commits` (created when missing), with
    /// the stream of `seed` appended up to the newest commit's end.
    pub fn open(dir: &Path, seed: u64) -> Self {
        let path = log_path(dir);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let ends: Vec<u64> = text
            .split_inclusive('\n')
            .filter(|line| line.ends_with('\n'))
            .map(|line| {
                line.trim()
                    .parse()
                    .expect("a commit line of the lake's log")
            })
            .collect();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open the lake's commit log");
        let lake = PersistedLake {
            lake: Arc::new(MemoryLake::new()),
            log,
            seed,
        };
        for end in ends {
            lake.append_up_to(end);
            lake.lake
                .commit(end)
                .expect("replay a persisted lake commit");
        }
        lake
    }

    /// The lookuper (and table) the bucket uses.
    pub fn lake(&self) -> &Arc<MemoryLake> {
        &self.lake
    }

    /// Appends the stream's batches to the lake's WAL until it reaches `end` (a batch boundary
    /// at or past it).
    pub fn append_up_to(&self, end: u64) {
        while self.lake.wal_end() < end {
            let batch = batch_at(self.seed, self.lake.wal_end());
            self.lake
                .append_batch(&to_write_batch(&batch))
                .expect("append to the lake's WAL");
        }
    }

    /// Commits a snapshot ending at `end` and makes it durable before returning it.
    pub fn commit(&mut self, end: u64) -> LakeSnapshot {
        let snapshot = self.lake.commit(end).expect("lake commit");
        // One write of the whole line, so a kill leaves it whole or absent (in practice; a torn
        // line is cut off at the next open either way).
        self.log
            .write_all(format!("{end}\n").as_bytes())
            .expect("append to the lake's commit log");
        self.log.sync_all().expect("sync the lake's commit log");
        snapshot
    }
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join("lake-commits")
}
