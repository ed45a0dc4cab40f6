//! The engine's floor: the bytes a fresh store of the same engine needs for exactly the live
//! window, so a run's bytes on disk can be judged against what the engine itself needs rather
//! than against the raw window (a fresh sled database is several times the window it holds, a
//! redb file about three: that is the engine, not Tidemark's reclamation).

use std::path::{Path, PathBuf};

use tidemark::{Backend, BackendConfig, Engine as _, EngineOptions};
use tidemark_test_support::stream::{RecordStream as _, SeededStream};

use crate::Result;
use crate::store_dirs::remove_store;

/// Where a run's floor is built: a directory of its own beside the run's store, so a backend
/// whose buckets share files per parent directory (fjall) builds a fresh database too.
pub fn floor_root(store: &Path) -> PathBuf {
    let mut name = store.file_name().unwrap_or_default().to_os_string();
    name.push(".floor");
    store.with_file_name(name)
}

/// Writes the stream's records at `from..to` once, in batches of `batch` as the run wrote them,
/// into a fresh store of `backend` opened with the run's options and contexts, flushes it, and
/// returns its bytes on disk. The store is removed afterwards, whatever happened.
pub fn measure(
    backend: Backend,
    root: &Path,
    options: EngineOptions,
    backends: &BackendConfig,
    stream: &SeededStream,
    (from, to): (u64, u64),
    batch: u64,
) -> Result<u64> {
    remove_store(root)?;
    let build = || -> Result<u64> {
        let engine = backend.open_with(&root.join("bucket"), options, backends)?;
        let mut offset = from;
        while offset < to {
            let end = offset.saturating_add(batch.max(1)).min(to);
            engine.apply(&stream.batch(offset, end))?;
            offset = end;
        }
        engine.flush()?;
        engine.wait_for_background_work()?;
        Ok(engine.stats()?.bytes_on_disk)
    };
    let measured = build();
    let removed = remove_store(root);
    let bytes = measured?;
    removed?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_floor_holds_the_newest_version_of_each_key_in_the_window_and_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let stream = SeededStream::new(5, 200, 10, 32);
        let root = floor_root(&tmp.path().join("sled-tidemark"));
        assert_eq!(root, tmp.path().join("sled-tidemark.floor"));
        let window = (300, 2_000);
        // The memory engine reports the encoded bytes it holds: one entry per key, the newest.
        let mut newest = BTreeMap::new();
        for offset in window.0..window.1 {
            let record = stream.record(offset);
            newest.insert(record.key().to_vec(), record.stored_len());
        }
        let expected: u64 = newest.values().sum();
        for backend in Backend::compiled() {
            let backends = BackendConfig::default().with_budget(backend, 2).unwrap();
            let options = EngineOptions::default().with_sync_writes(false);
            let bytes = measure(backend, &root, options, &backends, &stream, window, 10).unwrap();
            if backend == Backend::Memory {
                assert_eq!(bytes, expected);
            } else {
                assert!(bytes > 0, "{backend}");
            }
            assert!(!root.exists(), "{backend}: the floor's store was removed");
        }
    }
}
