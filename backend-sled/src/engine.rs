//! [`SledEngine`]: the shared disk-engine skeleton over three sled trees.

use std::fmt;
use std::path::Path;
use tidemark_disk::BackendContext;

use tidemark_disk::layout::FileStart;
use tidemark_disk::sweeper::ChunkSizer;
use tidemark_disk::{DiskEngine, StorageInit};
use tidemark_engine_api::{Engine, EngineOptions, OpenEngine, Result, forward_engine};

use crate::context::SledContext;
use crate::storage::SledStorage;

/// Subdirectory of the bucket directory that holds sled's own files (the bucket directory itself
/// holds the Tidemark marker beside it).
pub const DB_SUBDIR: &str = "sled";

/// The file sled 0.34 keeps its log in, inside [`DB_SUBDIR`]: present in every sled database.
pub(crate) const SLED_DB_FILE: &str = "db";

/// The most index rows one sweep chunk visits, whatever `sweep_chunk_rows` asks for.
///
/// A sled 0.34 transaction holds a **process-wide** lock for its whole closure: while a chunk
/// runs, every transaction and every plain read or write of *every* sled store in the process
/// waits (sled takes the shared side of that lock for ordinary operations once any transaction
/// has run). A chunk of the default 4096 rows would stall all sled buckets, not just this one, so
/// sled chunks are capped well below it; reclaiming takes a few more, shorter transactions.
pub const MAX_SWEEP_CHUNK_ROWS: usize = 256;

/// A bucket stored in sled, reclaimed by the shared range-scan sweeper.
///
/// The engine contract (locks, `W` and the applied end, counters, reports) is the shared
/// [`DiskEngine`]; this type adds sled's diagnostics. The applied end and the live-entry count
/// change in the same transaction as the rows they describe; the watermark is written to `meta`
/// and flushed before it is published.
///
/// sled has no read-only mode: with [`tidemark_engine_api::OpenMode::ReadOnly`] the engine writes nothing
/// and refuses every write, but sled itself opens its files read-write, takes its lock and may
/// extend or rewrite its own log and snapshot files while it recovers at open and flushes at
/// close (the keys and values stay the same).
///
/// If a flush that follows a committed write fails, the engine is marked failed: from then on
/// every write, watermark change, reclaim and flush returns [`tidemark_engine_api::Error::StoreFailed`]
/// until the store is reopened (see there why a retry must not simply succeed).
pub struct SledEngine {
    inner: DiskEngine<SledStorage>,
}

impl fmt::Debug for SledEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledEngine")
            .field("path", &self.path())
            .field("watermark", &self.inner.watermark())
            .field("applied_end", &self.inner.applied_end())
            .field("failed", &self.inner.is_failed())
            .finish_non_exhaustive()
    }
}

impl SledEngine {
    /// The shared skeleton under the engine (see `DiskBackend::skeleton`).
    pub(crate) fn skeleton(&self) -> &DiskEngine<SledStorage> {
        &self.inner
    }

    /// The bucket directory this engine was opened at.
    pub fn path(&self) -> &Path {
        self.inner.dir()
    }

    /// The rows per sweep chunk actually used: `sweep_chunk_rows` capped at
    /// [`MAX_SWEEP_CHUNK_ROWS`].
    pub fn sweep_chunk_rows(&self) -> usize {
        self.inner.storage().sweep_chunk_rows()
    }

    /// Rebuilds into a fresh database this engine has switched to since it was opened (see
    /// [`crate::REBUILD_GROWTH`]).
    pub fn rebuilds(&self) -> u64 {
        self.inner.storage().rebuilds()
    }

    /// Rebuilds that failed since the engine was opened (logged where they failed; one that
    /// failed before its switch left the store as it was).
    pub fn failed_rebuilds(&self) -> u64 {
        self.inner
            .storage()
            .failed_rebuilds
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Test hook: while `hold` is set, this bucket's rebuild copies wait between two chunks
    /// (before their switch), so a test can act while one is in progress; closing the engine
    /// releases them (and abandons the rebuild).
    #[cfg(feature = "testing")]
    pub fn hold_rebuilds(&self, hold: bool) {
        self.inner.storage().progress().hold(hold);
    }

    /// Test hook: waits until a rebuild copy of this bucket waits at [`Self::hold_rebuilds`];
    /// `false` when no rebuild runs or it ended first.
    #[cfg(feature = "testing")]
    pub fn wait_rebuild_held(&self) -> bool {
        self.inner.storage().progress().wait_held()
    }

    /// The generation of the sled database in use: 0 until the bucket's first rebuild, then one
    /// more with each ([`crate::GENERATION_FILE`] names it on disk).
    pub fn generation(&self) -> Result<u64> {
        self.inner
            .read_storage("generation", |s| Ok(s.generation()?.number))
    }

    /// sled's own figure for the bytes its files occupy (with those of a generation switched
    /// away from that a reader still held).
    pub fn size_on_disk(&self) -> Result<u64> {
        self.inner
            .read_storage("size_on_disk", |s| s.size_on_disk())
    }
}

impl SledEngine {
    /// Opens (by default creating) the bucket at `path`, taking its share of `context`: a page
    /// cache of [`SledContext::cache_bytes_per_bucket`], a place in its bucket budget (an open
    /// beyond it, or beyond the process's descriptor limit, is
    /// [`tidemark_engine_api::Error::ResourceLimit`]) and its flusher thread. The share is given back when
    /// the engine is dropped.
    pub fn open_in(context: &SledContext, path: &Path, options: EngineOptions) -> Result<Self> {
        // Admitted before anything is created, so a refused open leaves no trace.
        let lease = context.admit(path)?;
        // The skeleton writes the marker first: a directory of another backend (or a newer build)
        // is refused before sled creates anything in it.
        let inner = DiskEngine::open(path, options, |init: StorageInit<'_>| {
            // The generation the pointer names (a store never rebuilt: `DB_SUBDIR`).
            let number = crate::generation::current(init.dir)?;
            let db_dir = crate::generation::db_dir(init.dir, number);
            let mode = init.options.open_mode;
            // sled creates a missing database; it must not where a store lived, nor for an open
            // of an existing store.
            init.require_engine_file(&db_dir.join(SLED_DB_FILE), "sled database", FileStart::Log)?;
            let chunks = ChunkSizer::for_options(init.options, MAX_SWEEP_CHUNK_ROWS);
            SledStorage::open(
                context,
                lease,
                init.dir,
                number,
                &db_dir,
                chunks,
                mode.writes(),
            )
        })?;
        Ok(SledEngine { inner })
    }
}

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

impl OpenEngine for SledEngine {
    /// Opens from the process-wide default context ([`SledContext::global`]).
    fn open(path: &Path, options: EngineOptions) -> Result<Self> {
        Self::open_in(&SledContext::global()?, path, options)
    }
}

impl Engine for SledEngine {
    forward_engine!(inner);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

    use std::sync::atomic::Ordering;

    use tidemark_engine_api::{Error, WriteBatch};

    use super::*;

    fn assert_store_failed(err: Error) {
        assert!(matches!(err, Error::StoreFailed { .. }), "{err}");
        assert!(err.to_string().contains("must be reopened"), "{err}");
    }

    fn batch(first: u64) -> WriteBatch {
        let mut batch = WriteBatch::new();
        batch.put(format!("k{first}"), "v", first);
        batch
    }

    #[test]
    fn a_failed_flush_after_a_synced_apply_fails_the_engine_until_reopened() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap();
        engine.apply(&batch(0)).unwrap();

        engine
            .inner
            .storage()
            .fail_next_flush
            .store(true, Ordering::Release);
        let err = engine.apply(&batch(1)).unwrap_err();
        assert_store_failed(err);
        // The batch committed (visible, applied end moved) but may not be durable...
        assert_eq!(engine.applied_end(), 2);
        assert!(engine.lookup(b"k1").unwrap().offset().is_some());
        // ...so the host's retry must not be acknowledged as "already applied".
        assert_store_failed(engine.apply(&batch(1)).unwrap_err());
        assert_store_failed(engine.apply(&batch(2)).unwrap_err());
        assert_store_failed(engine.advance_watermark(1).unwrap_err());
        assert_store_failed(engine.adopt_lake_watermark(1).unwrap_err());
        assert_store_failed(engine.reclaim().unwrap_err());
        assert_store_failed(engine.reclaim_below(1).unwrap_err());
        assert_store_failed(engine.flush().unwrap_err());
        assert_store_failed(engine.skeleton().insert_raw(b"raw", b"\xff").unwrap_err());
        assert_eq!(engine.watermark(), 0);
        assert_eq!(engine.stats().unwrap().live_entries, 2);
        drop(engine);

        // Reopening restores exactly what is durable and the engine works again.
        let engine = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap();
        let end = engine.applied_end();
        assert!(end == 1 || end == 2, "applied end {end}");
        engine.apply(&batch(1)).unwrap();
        engine.apply(&batch(2)).unwrap();
        assert_eq!(engine.applied_end(), 3);
        assert_eq!(engine.stats().unwrap().live_entries, 3);
    }

    #[test]
    fn a_failed_watermark_flush_fails_the_engine() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap();
        engine.apply(&batch(0)).unwrap();
        engine
            .inner
            .storage()
            .fail_next_flush
            .store(true, Ordering::Release);
        assert_store_failed(engine.advance_watermark(1).unwrap_err());
        // Not published: memory never claims a watermark that may not be durable.
        assert_eq!(engine.watermark(), 0);
        assert_store_failed(engine.advance_watermark(1).unwrap_err());
    }

    #[test]
    fn verify_finds_rows_that_changed_behind_the_digest() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = SledEngine::open(tmp.path(), EngineOptions::default()).unwrap();
        engine.apply(&batch(0)).unwrap();
        engine.apply(&batch(1)).unwrap();
        let mut again = WriteBatch::new();
        again.put("k1", "v2", 2);
        engine.apply(&again).unwrap();
        let report = engine.verify().unwrap();
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.engine_checks, ["live-row digest (every data row)"]);
        // k1's older version, as sled serves it from an older page: it decodes, its tag is
        // below the applied end and its (stale) index row is there.
        let older = tidemark_engine_api::codec::encode_value(b"k1", 1, b"v");
        engine
            .inner
            .storage()
            .data()
            .unwrap()
            .insert(b"k1", older)
            .unwrap();
        let report = engine.verify().unwrap();
        let finding = report
            .finding(tidemark_engine_api::verify::Damage::DigestMismatch)
            .unwrap_or_else(|| panic!("{report:?}"));
        assert_eq!(finding.examples[0].key, b"live_digest");
        assert!(
            finding.examples[0].detail.contains("the 2 rows read"),
            "{finding:?}"
        );
        // Here the newer write's index row survived and names it too; an older `by_offset`
        // page would not.
        assert!(
            report
                .finding(tidemark_engine_api::verify::Damage::IndexRowWithoutData)
                .is_some()
        );
        assert_eq!(report.damaged(), 2, "{report:?}");
    }

    #[test]
    fn unsynced_applies_do_not_flush_and_an_explicit_flush_failure_can_be_retried() {
        let tmp = tempfile::tempdir().unwrap();
        let options = EngineOptions::default().with_sync_writes(false);
        let engine = SledEngine::open(tmp.path(), options).unwrap();
        engine
            .inner
            .storage()
            .fail_next_flush
            .store(true, Ordering::Release);
        // No flush on this path, so the injected failure is still pending afterwards.
        engine.apply(&batch(0)).unwrap();
        // `flush` promises nothing it has not done: a failure is returned and a retry flushes.
        assert!(engine.flush().is_err());
        engine.flush().unwrap();
        engine.apply(&batch(1)).unwrap();
    }
}
