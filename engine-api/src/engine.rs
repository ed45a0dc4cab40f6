//! The engine contract: one synchronous engine instance per bucket.

use std::path::Path;

use crate::batch::{Record, WriteBatch};
use crate::error::Result;
use crate::options::EngineOptions;
use crate::outcome::{ApplyOutcome, LocalLookup, ReclaimReport, WatermarkUpdate};
use crate::stats::EngineStats;

/// A bucket's local key-value state, tagged with WAL offsets and reclaimed below a watermark.
///
/// Every call may block on storage; async callers use `spawn_blocking`. All methods take `&self`
/// and are safe to call concurrently: `apply` calls are serialised internally, `lookup` and
/// `reclaim` run alongside them.
pub trait Engine: Send + Sync {
    /// Short backend name (`"memory"`, `"sled"`, `"redb"`, `"rocksdb"`).
    fn backend_name(&self) -> &'static str;

    /// Applies a batch atomically (all or nothing, also across a crash), skipping records that are
    /// covered (`offset < W`) or already applied (`offset < applied end`). The new applied end is
    /// written in the same atomic write. Invalid input is rejected with nothing written.
    fn apply(&self, batch: &WriteBatch) -> Result<ApplyOutcome>;

    /// Applies a single put.
    fn put(&self, key: &[u8], value: &[u8], offset: u64) -> Result<ApplyOutcome> {
        self.apply(&WriteBatch::from(vec![Record::put(key, value, offset)]))
    }

    /// Applies a single delete (stores a tagged tombstone).
    fn delete(&self, key: &[u8], offset: u64) -> Result<ApplyOutcome> {
        self.apply(&WriteBatch::from(vec![Record::delete(key, offset)]))
    }

    /// Whatever is stored locally for `key`, covered or not.
    fn lookup(&self, key: &[u8]) -> Result<LocalLookup>;

    /// Raises the watermark to `min(w, applied end)` and makes it durable before returning.
    /// `w <= W` changes nothing and says so. Does not reclaim.
    fn advance_watermark(&self, w: u64) -> Result<WatermarkUpdate>;

    /// Recovery only: raises the watermark to `max(W, lake_end)` *without* clamping to the applied
    /// end, because the lake's committed snapshot holds everything below `lake_end` whether or not
    /// this replica applied it (a lagging follower becoming leader). Durable before returning.
    fn adopt_lake_watermark(&self, lake_end: u64) -> Result<WatermarkUpdate>;

    /// The current watermark `W`.
    fn watermark(&self) -> u64;

    /// The current applied end.
    fn applied_end(&self) -> u64;

    /// Physically removes every entry covered when the call starts (values and tombstones) and
    /// nothing else.
    fn reclaim(&self) -> Result<ReclaimReport>;

    /// Recovery only: physically removes every entry with `offset < min(threshold, W)`,
    /// **ignoring the retention distance**, and reports it like [`reclaim`](Self::reclaim).
    ///
    /// A replica that lagged the lake (recovery adopted a watermark above its applied end) holds
    /// local entries that may be older than the lake's versions of the same keys; the retention
    /// margin must not keep them, or a lookup would serve them as authoritative. Never touches an
    /// entry at or above `W`.
    fn reclaim_below(&self, threshold: u64) -> Result<ReclaimReport>;

    /// Sizes, estimates and counters.
    fn stats(&self) -> Result<EngineStats>;

    /// Makes every returned write durable (useful with `sync_writes = false`).
    fn flush(&self) -> Result<()>;
}

/// An engine stored in a directory, opened (or created) from a path.
pub trait OpenEngine: Engine + Sized {
    /// Opens the store at `path`, creating the directory when missing, and restores the
    /// watermark, the applied end and all data. A directory holding another backend's files or a
    /// newer format is an error.
    fn open(path: &Path, options: EngineOptions) -> Result<Self>;
}

/// Forwards the whole trait through a smart pointer, so `Arc<dyn Engine>` and `Box<dyn Engine>`
/// are engines too.
macro_rules! forward_engine {
    ($($ptr:ident)::+) => {
        impl<E: Engine + ?Sized> Engine for $($ptr)::+<E> {
            fn backend_name(&self) -> &'static str {
                (**self).backend_name()
            }
            fn apply(&self, batch: &WriteBatch) -> Result<ApplyOutcome> {
                (**self).apply(batch)
            }
            fn lookup(&self, key: &[u8]) -> Result<LocalLookup> {
                (**self).lookup(key)
            }
            fn advance_watermark(&self, w: u64) -> Result<WatermarkUpdate> {
                (**self).advance_watermark(w)
            }
            fn adopt_lake_watermark(&self, lake_end: u64) -> Result<WatermarkUpdate> {
                (**self).adopt_lake_watermark(lake_end)
            }
            fn watermark(&self) -> u64 {
                (**self).watermark()
            }
            fn applied_end(&self) -> u64 {
                (**self).applied_end()
            }
            fn reclaim(&self) -> Result<ReclaimReport> {
                (**self).reclaim()
            }
            fn reclaim_below(&self, threshold: u64) -> Result<ReclaimReport> {
                (**self).reclaim_below(threshold)
            }
            fn stats(&self) -> Result<EngineStats> {
                (**self).stats()
            }
            fn flush(&self) -> Result<()> {
                (**self).flush()
            }
        }
    };
}

forward_engine!(std::sync::Arc);
forward_engine!(Box);
