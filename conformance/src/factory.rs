//! How the suite creates, reopens and pokes at an engine of a given backend.

use std::path::Path;

use tidemark_disk::sweeper::SweepTotals;
use tidemark_disk::testing::Declared;
use tidemark_engine_api::{Engine, EngineOptions, Result};

/// What a backend can do beyond the core contract; cases that need a capability the backend
/// lacks are reported as skipped (never `#[ignore]`d).
///
/// What a backend states about itself is its [`Declared`]: a disk backend's own
/// `TestedBackend::DECLARED`, taken as it is, so backend and suite share one vocabulary. The other
/// capabilities are the factory's: what every engine it opens can do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capabilities {
    /// What the backend declares: `exact_live_entries` (`stats().live_entries` is exact);
    /// `background_reclaim` (covered entries may also disappear *outside* `reclaim`, as every
    /// RocksDB compaction runs the filter: DESIGN allows it, covered entries are the lake's, so
    /// lookups of covered keys may miss early and a reclaim may find less left to remove than the
    /// model); `offset_index` (reclaim sweeps an offset-ordered index with the shared sweeper, so
    /// [`EngineFactory::last_sweep`] reports its row-level work and
    /// [`EngineFactory::inject_index_row`] and [`EngineFactory::remove_index_row`] plant and
    /// remove index rows); `read_only_files` (a read-only open leaves every file of the store byte
    /// for byte as it was); `self_contained_directory` (a copy of the directory is a copy of the
    /// store, which the hostile-file and unsynced-copy cases damage or copy; fjall keeps a
    /// bucket's data in a database its directory's parent shares); and the space multiples the
    /// case `bytes_on_disk_bounded_by_the_window` holds a store with [`Capabilities::files`] to.
    pub declared: Declared,
    /// The engine persists to its directory and can be closed and reopened.
    pub reopen: bool,
    /// [`EngineFactory::inject_raw`] can store arbitrary bytes (for corrupt-value cases).
    pub raw_injection: bool,
    /// `open` follows [`tidemark_engine_api::OpenMode`]: it can require an existing store (creating
    /// nothing) and open one read-only (refusing every write).
    pub open_existing: bool,
    /// The store lives in files of its directory (the hostile-file cases damage them; the space
    /// case bounds their bytes).
    pub files: bool,
    /// [`EngineFactory::faults`] gives the engine's injected-fault plan (the disk skeleton's).
    pub faults: bool,
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
    /// dropped, chunks). Only called when the backend declares an `offset_index`
    /// ([`Capabilities::declared`]).
    fn last_sweep(&self, engine: &Self::Engine) -> Option<SweepTotals> {
        let _ = engine;
        None
    }

    /// The engine's injected-fault plan ([`tidemark_disk::testing::Faults`]), `None` where the backend has
    /// none (the memory engine); cases about storage faults need [`Capabilities::faults`].
    fn faults<'a>(&self, engine: &'a Self::Engine) -> Option<&'a tidemark_disk::testing::Faults> {
        let _ = engine;
        None
    }

    /// Writes `row` verbatim into the offset index, for cases about index rows the sweeper
    /// cannot read. Only called when the backend declares an `offset_index`
    /// ([`Capabilities::declared`]).
    fn inject_index_row(&self, engine: &Self::Engine, row: &[u8]) -> Result<()> {
        let _ = (engine, row);
        Err(tidemark_engine_api::Error::Unsupported(format!(
            "{} has no offset index",
            Self::NAME
        )))
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
    /// missing their index row. Only called when the backend declares an `offset_index`
    /// ([`Capabilities::declared`]).
    fn remove_index_row(&self, engine: &Self::Engine, row: &[u8]) -> Result<bool> {
        let _ = (engine, row);
        Err(tidemark_engine_api::Error::Unsupported(format!(
            "{} has no offset index",
            Self::NAME
        )))
    }
}
