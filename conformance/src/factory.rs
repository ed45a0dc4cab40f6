//! How the suite creates, reopens and pokes at an engine of a given backend.

use std::path::Path;

use tidemark_disk::sweeper::SweepTotals;
use tidemark_engine_api::{Engine, EngineOptions, Result};

/// What a backend can do beyond the core contract; cases that need a capability the backend
/// lacks are reported as skipped (never `#[ignore]`d).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// The engine persists to its directory and can be closed and reopened.
    pub reopen: bool,
    /// `stats().live_entries` is exact.
    pub exact_live_entries: bool,
    /// [`EngineFactory::inject_raw`] can store arbitrary bytes (for corrupt-value cases).
    pub raw_injection: bool,
    /// Covered entries may also disappear *outside* `reclaim` (RocksDB: every compaction runs the
    /// filter). DESIGN allows this — covered entries are the lake's — so lookups of covered keys
    /// may miss early and a reclaim may find less left to remove than the model.
    pub background_reclaim: bool,
    /// Reclaim sweeps an offset-ordered index with the shared sweeper (sled, redb):
    /// [`EngineFactory::last_sweep`] reports its row-level work and
    /// [`EngineFactory::inject_index_row`] can plant an index row and
    /// [`EngineFactory::remove_index_row`] remove one.
    pub offset_index: bool,
    /// `open` follows [`tidemark_engine_api::OpenMode`]: it can require an existing store (creating
    /// nothing) and open one read-only (refusing every write).
    pub open_existing: bool,
    /// A read-only open leaves every file of the store byte for byte as it was (the engine opens
    /// its files read-only; sled cannot).
    pub read_only_files: bool,
    /// The store lives in files of its directory (the hostile-file cases damage them; the space
    /// case bounds their bytes).
    pub files: bool,
    /// [`EngineFactory::faults`] gives the engine's injected-fault plan (the disk skeleton's).
    pub faults: bool,
    /// The whole store lives in its directory, so a copy of the directory is a copy of the
    /// store (the hostile-file and unsynced-copy cases damage or copy it). fjall keeps a
    /// bucket's data in a database its directory's parent shares.
    pub self_contained: bool,
}

/// Creates engines of one backend for the suite.
pub trait EngineFactory: Send + Sync + 'static {
    /// The engine type.
    type Engine: Engine + 'static;

    /// Backend name as it appears in test names (`memory`, `sled`, ...).
    const NAME: &'static str;

    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;

    /// Opens the engine stored in `dir` as `options.open_mode` says (by default creating it
    /// when missing). For a backend without [`Capabilities::reopen`] every call returns a fresh,
    /// empty engine.
    fn open(&self, dir: &Path, options: EngineOptions) -> Result<Self::Engine>;

    /// Stores `stored` verbatim under `key`, bypassing the codec, so the suite can check that
    /// reclamation keeps and counts what it cannot decode. Only called when
    /// [`Capabilities::raw_injection`] is true.
    ///
    /// The entry must be *reachable by reclamation* once any threshold above 0 is in force: a
    /// backend whose sweeper walks an offset index also writes an index row for it (offset 0
    /// when `stored` has no readable tag), so `reclaim` meets the entry, keeps it and counts it
    /// in `corrupt_kept`.
    fn inject_raw(&self, engine: &Self::Engine, key: &[u8], stored: &[u8]) -> Result<()>;

    /// Pushes everything written so far as deep into the engine's storage as it goes (RocksDB:
    /// flush memtables, then compact to the bottom level), so cases can place *older* versions
    /// of a key below newer ones and check they never reappear. A no-op where storage has no
    /// levels.
    fn settle(&self, engine: &Self::Engine) -> Result<()> {
        let _ = engine;
        Ok(())
    }

    /// Row-level detail of the engine's most recent reclaim (index rows visited, stale rows
    /// dropped, chunks). Only called when [`Capabilities::offset_index`] is true.
    fn last_sweep(&self, engine: &Self::Engine) -> Option<SweepTotals> {
        let _ = engine;
        None
    }

    /// The engine's injected-fault plan ([`tidemark_disk::fault`]), `None` where the backend has
    /// none (the memory engine); cases about storage faults need [`Capabilities::faults`].
    fn faults<'a>(&self, engine: &'a Self::Engine) -> Option<&'a tidemark_disk::fault::Faults> {
        let _ = engine;
        None
    }

    /// Writes `row` verbatim into the offset index, for cases about index rows the sweeper
    /// cannot read. Only called when [`Capabilities::offset_index`] is true.
    fn inject_index_row(&self, engine: &Self::Engine, row: &[u8]) -> Result<()> {
        let _ = (engine, row);
        Err(tidemark_engine_api::Error::Unsupported(format!(
            "{} has no offset index",
            Self::NAME
        )))
    }

    /// The most bytes on disk a store of this backend holds, above its empty-store footprint, per
    /// byte of its uncovered window under a long stream with a trailing lake (the case
    /// `bytes_on_disk_bounded_by_the_window`: `bytes_on_disk <= multiple x window + empty
    /// store`). A declared figure, set from a measurement with headroom, so a backend whose
    /// space amplification grows fails the case. `None` where the store keeps no files (the case
    /// needs [`Capabilities::files`] and refuses a backend with files that states none).
    fn window_multiple(&self) -> Option<f64> {
        None
    }

    /// The most bytes on disk above the empty store per byte of the window that the same case
    /// allows after any reclaim over the last half of its stream (a backend whose size swings
    /// from reclaim to reclaim states a higher peak than its end figure); by default
    /// [`EngineFactory::window_multiple`].
    fn window_peak_multiple(&self) -> Option<f64> {
        self.window_multiple()
    }

    /// Whether damage to the store file `file` (relative to the bucket directory) is always
    /// caught by the engine's own checksums when an entry in it is read, so that every lookup
    /// it fails must be [`tidemark_engine_api::Error::Corrupt`] naming the key (RocksDB's table files).
    /// The hostile-file cases hold the backend to it; elsewhere a lookup may also fail with the
    /// engine's own error (`Backend`), for damage to its structures rather than to an entry.
    fn reads_detect_damage_in(&self, file: &Path) -> bool {
        let _ = file;
        false
    }

    /// Removes `row` from the offset index (whether it was there), for cases about data rows
    /// missing their index row. Only called when [`Capabilities::offset_index`] is true.
    fn remove_index_row(&self, engine: &Self::Engine, row: &[u8]) -> Result<bool> {
        let _ = (engine, row);
        Err(tidemark_engine_api::Error::Unsupported(format!(
            "{} has no offset index",
            Self::NAME
        )))
    }
}
