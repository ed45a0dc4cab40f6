//! Options shared by every engine.

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
    /// Rows per sweeper chunk transaction for the B-tree backends (default 4096). Smaller chunks
    /// block writers for shorter periods; larger chunks reclaim with less overhead.
    pub sweep_chunk_rows: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            retention_distance: 0,
            sync_writes: true,
            sweep_chunk_rows: 4096,
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
}
