//! Process-wide bookkeeping of which sled stores this process has open.
//!
//! sled 0.34 holds an exclusive file lock on its log for as long as any handle lives, and some of
//! those handles belong to its background I/O threads, which finish a moment *after* the last
//! `Db` is dropped. Reopening a bucket right after closing it (tests, recovery, leader change in
//! one process) would then fail spuriously. The registry tells that case apart from a real
//! conflict: a store this process closed is reopened with a bounded wait for the lock, a store
//! this process still has open is refused at once, and a store locked by another process fails on
//! sled's first attempt.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tidemark_engine_api::{Error, Result};

use crate::error::{BACKEND, sled_error};

/// Longest wait for the lock a just-closed instance's background threads still hold.
const LINGER_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Open,
    Closed,
}

static STORES: Mutex<BTreeMap<PathBuf, Slot>> = Mutex::new(BTreeMap::new());

fn stores() -> MutexGuard<'static, BTreeMap<PathBuf, Slot>> {
    // The one exception to the workspace lock policy (`tidemark_engine_api::sync`: a poisoned lock is
    // `Error::Poisoned`): every critical section on this map is a single map operation, so a
    // poisoned map is still consistent and is recovered rather than refused (this also runs in
    // `Drop`, which cannot return an error).
    tidemark_engine_api::sync::lock_recovered(&STORES)
}

/// Marks a store open for as long as it lives; dropping it marks the store closed. It must be
/// dropped *after* the sled handles, which is why it is the last field of the engine.
#[derive(Debug)]
pub(crate) struct OpenStore {
    path: PathBuf,
    previous: Option<Slot>,
    opened: bool,
}

impl Drop for OpenStore {
    fn drop(&mut self) {
        let mut stores = stores();
        match (self.opened, self.previous) {
            (true, _) | (false, Some(Slot::Closed)) => {
                stores.insert(self.path.clone(), Slot::Closed);
            }
            (false, _) => {
                stores.remove(&self.path);
            }
        }
    }
}

/// Claims `dir` (an existing bucket directory) for this process, then opens sled's database in
/// `db_dir` with `config`, waiting for the lock only when this process itself closed the store.
pub(crate) fn open(
    dir: &Path,
    db_dir: &Path,
    config: &sled::Config,
) -> Result<(sled::Db, OpenStore)> {
    let path = dir.canonicalize()?;
    let previous = {
        let mut stores = stores();
        let previous = stores.get(&path).copied();
        if previous == Some(Slot::Open) {
            return Err(Error::backend(
                BACKEND,
                io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("{} is already open in this process", dir.display()),
                ),
            ));
        }
        stores.insert(path.clone(), Slot::Open);
        previous
    };
    let mut guard = OpenStore {
        path,
        previous,
        opened: false,
    };
    let db = open_waiting(db_dir, config, previous == Some(Slot::Closed))?;
    guard.opened = true;
    Ok((db, guard))
}

fn open_waiting(db_dir: &Path, config: &sled::Config, may_linger: bool) -> Result<sled::Db> {
    let deadline = Instant::now() + LINGER_WAIT;
    let mut delay = Duration::from_millis(1);
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            Err(e) if may_linger && is_lock_conflict(&e) && Instant::now() < deadline => {
                tracing::debug!(path = %db_dir.display(), "waiting for a closed sled store's lock");
                thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(sled_error(e)),
        }
    }
}

/// sled 0.34 reports a held lock only as an `Other` I/O error with this message prefix.
fn is_lock_conflict(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().starts_with("could not acquire lock"))
}
