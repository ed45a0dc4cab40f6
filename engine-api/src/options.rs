//! Options shared by every engine.

use std::time::Duration;

/// Whether an open may create a store, and whether it may write to it (§ Engine contract /
/// open).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum OpenMode {
    /// Open the store at the path, creating the directory, its marker and the engine's files
    /// when they are missing (the default: what a host opening its buckets wants).
    #[default]
    CreateIfMissing,
    /// Open an existing store, read-write. A path that holds no Tidemark store is
    /// [`Error::NoStore`](crate::Error::NoStore) and nothing is created there.
    MustExist,
    /// Open an existing store without writing to it: like [`OpenMode::MustExist`], and every
    /// write, watermark change, reclaim and flush is [`Error::ReadOnly`](crate::Error::ReadOnly).
    /// The backend opens its files read-only where its engine can (RocksDB, redb; sled has no
    /// read-only mode, see § Backends / sled).
    ReadOnly,
}

impl OpenMode {
    /// Whether this mode creates a missing store.
    pub fn creates(self) -> bool {
        self == OpenMode::CreateIfMissing
    }

    /// Whether this mode writes to the store.
    pub fn writes(self) -> bool {
        self != OpenMode::ReadOnly
    }
}

/// Options for opening an engine. `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineOptions {
    /// Keep this many offsets below the watermark as a safety margin: reclaim removes entries with
    /// `offset < W - retention_distance` (saturating). Default 0.
    pub retention_distance: u64,
    /// Durability of `apply`. When true (default) a returned `apply` survives a crash of the
    /// process or machine. When false, applied batches may be lost on a crash (but never torn:
    /// batches stay atomic, with their applied end) in exchange for throughput. Whatever this
    /// says, `advance_watermark` and `adopt_lake_watermark` are always durable before they
    /// return, and make every earlier `apply` durable with them.
    pub sync_writes: bool,
    /// Most rows per sweeper chunk transaction for the B-tree backends (default 4096). Smaller
    /// chunks block writers for shorter periods; larger chunks reclaim with less overhead.
    pub sweep_chunk_rows: usize,
    /// How long one sweeper chunk should take (default 1 ms): the sweep sizes its chunks from
    /// the pace of the last one so that each takes about this long, never more rows than
    /// `sweep_chunk_rows`. A writer waits for at most the chunk in flight, so this bounds what a
    /// reclaim adds to a write's latency whatever the rows cost. `None` sweeps in chunks of
    /// exactly `sweep_chunk_rows` (tests that count chunks).
    pub sweep_chunk_time: Option<Duration>,
    /// Whether the open may create the store and write to it (default
    /// [`OpenMode::CreateIfMissing`]).
    pub open_mode: OpenMode,
}

/// The default [`EngineOptions::sweep_chunk_time`].
pub const DEFAULT_SWEEP_CHUNK_TIME: Duration = Duration::from_millis(1);

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            retention_distance: 0,
            sync_writes: true,
            sweep_chunk_rows: 4096,
            sweep_chunk_time: Some(DEFAULT_SWEEP_CHUNK_TIME),
            open_mode: OpenMode::CreateIfMissing,
        }
    }
}

impl EngineOptions {
    /// Sets the retention distance.
    pub fn with_retention_distance(mut self, distance: u64) -> Self {
        self.retention_distance = distance;
        self
    }

    /// Sets whether writes are synced before returning.
    pub fn with_sync_writes(mut self, sync: bool) -> Self {
        self.sync_writes = sync;
        self
    }

    /// Sets the sweeper chunk size (clamped to at least 1).
    pub fn with_sweep_chunk_rows(mut self, rows: usize) -> Self {
        self.sweep_chunk_rows = rows.max(1);
        self
    }

    /// Sets the time a sweeper chunk aims at (`None`: chunks of exactly `sweep_chunk_rows`).
    pub fn with_sweep_chunk_time(mut self, time: Option<Duration>) -> Self {
        self.sweep_chunk_time = time;
        self
    }

    /// Sets the open mode.
    pub fn with_open_mode(mut self, mode: OpenMode) -> Self {
        self.open_mode = mode;
        self
    }
}
