//! The engine contract: one synchronous engine instance per bucket.

use std::path::Path;

use crate::batch::{Record, WriteBatch};
use crate::cost::ReclaimCost;
use crate::error::Result;
use crate::options::EngineOptions;
use crate::outcome::{ApplyOutcome, LocalLookup, ReclaimReport, WatermarkUpdate};
use crate::stats::{EngineStats, Reclaimable};
use crate::verify::VerifyReport;

/// A bucket's local key-value state, tagged with WAL offsets and reclaimed below a watermark.
///
/// Each method's semantics are specified in `docs/DESIGN.md` (workspace root), section *Engine
/// contract*; the conformance suite checks every backend against it.
///
/// Every call may block on storage; async callers use `spawn_blocking`. All methods take `&self`
/// and are safe to call concurrently: `apply` calls are serialised internally, `lookup` and
/// `reclaim` run alongside them.
pub trait Engine: Send + Sync {
    /// Short backend name (`"memory"`, `"sled"`, `"redb"`, `"rocksdb"`).
    fn backend_name(&self) -> &'static str;

    /// What this backend's reclaim costs: the scheduler's skip rule follows from it. No
    /// default, so a new backend must say whether its reclaim sweeps or rewrites.
    fn reclaim_cost(&self) -> ReclaimCost;

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

    /// [`lookup`](Self::lookup) if it can answer without blocking for long (from memory or a
    /// cache), `None` if it might block on storage: async callers then run `lookup` on a
    /// blocking thread. Invalid keys are rejected as `lookup` rejects them. The default checks
    /// the key and says `None`.
    fn lookup_inline(&self, key: &[u8]) -> Result<Option<LocalLookup>> {
        crate::batch::validate_key(key)?;
        Ok(None)
    }

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

    /// What `reclaim()` would find now: covered entries and bytes (never low) beside everything
    /// stored. Cheap and non-blocking (no scan, no I/O), so a scheduler can decide from it
    /// whether a reclaim pays for itself.
    fn reclaimable(&self) -> Result<Reclaimable>;

    /// Makes every returned write durable (useful with `sync_writes = false`).
    fn flush(&self) -> Result<()>;

    /// Offline consistency check (§ Engine contract / verify): reads every stored entry (and
    /// offset-index row) and reports what is damaged; changes nothing. It reads the whole store
    /// and holds off writes and reclaims while it runs: meant for a store opened read-only.
    fn verify(&self) -> Result<VerifyReport>;

    /// Waits until the space work that reclaims handed to the background has finished (sled's
    /// rebuild into a fresh database, redb's file compaction), and returns at once when none is
    /// pending or the engine has none. For reports and tests that measure what reclamation gives
    /// back on disk; the scheduler and the bucket never wait for it. No default: a wrapper that
    /// forgot to forward it would report a store before its space came back.
    fn wait_for_background_work(&self) -> Result<()>;
}

/// An engine stored in a directory, opened (or created) from a path.
pub trait OpenEngine: Engine + Sized {
    /// Opens the store at `path` and restores the watermark, the applied end and all data. A
    /// directory holding another backend's files or a newer format is an error. By default a
    /// missing store is created; `options.open_mode` can require an existing store and forbid
    /// writes ([`OpenMode`](crate::options::OpenMode)).
    fn open(path: &Path, options: EngineOptions) -> Result<Self>;
}

/// Implements [`Engine`] methods by forwarding them to a field (or, with `deref`, through a
/// smart pointer), so a wrapper engine writes only the methods it changes.
///
/// `forward_engine!(inner)` forwards every method to `self.inner`; `forward_engine!(inner;
/// apply lookup)` forwards only the listed ones (write the others by hand in the same `impl`).
///
/// ```
/// use tidemark_engine_api::{Engine, EngineStats, MemoryEngine, Result, forward_engine};
///
/// /// Reports every stat as the inner engine does, but with the counters zeroed.
/// struct Quiet {
///     inner: MemoryEngine,
/// }
///
/// impl Engine for Quiet {
///     forward_engine!(inner; backend_name reclaim_cost apply lookup advance_watermark
///         adopt_lake_watermark watermark applied_end reclaim reclaim_below flush lookup_inline
///         reclaimable verify wait_for_background_work);
///     fn stats(&self) -> Result<EngineStats> {
///         Ok(EngineStats { counters: Default::default(), ..self.inner.stats()? })
///     }
/// }
///
/// let quiet = Quiet { inner: MemoryEngine::new(Default::default()) };
/// quiet.put(b"k", b"v", 0)?;
/// assert_eq!(quiet.stats()?.counters.applied, 0);
/// # Ok::<(), tidemark_engine_api::Error>(())
/// ```
#[macro_export]
macro_rules! forward_engine {
    ($target:tt) => {
        $crate::forward_engine!($target; backend_name reclaim_cost apply lookup
            advance_watermark adopt_lake_watermark watermark applied_end reclaim reclaim_below
            stats flush lookup_inline reclaimable verify wait_for_background_work);
    };
    ($target:tt; $($method:ident)*) => {
        $( $crate::forward_engine!(@one $target $method); )*
    };
    (@to $s:ident deref) => { (**$s) };
    (@to $s:ident $field:tt) => { $s.$field };
    // One forwarded method: its signature, and a body that calls the target with the arguments.
    (@fwd $t:tt $method:ident($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        fn $method(&self $(, $arg: $ty)*) -> $ret {
            $crate::forward_engine!(@to self $t).$method($($arg),*)
        }
    };
    (@one $t:tt backend_name) => {
        $crate::forward_engine!(@fwd $t backend_name() -> &'static str);
    };
    (@one $t:tt reclaim_cost) => {
        $crate::forward_engine!(@fwd $t reclaim_cost() -> $crate::ReclaimCost);
    };
    (@one $t:tt apply) => {
        $crate::forward_engine!(@fwd $t
            apply(batch: &$crate::WriteBatch) -> $crate::Result<$crate::ApplyOutcome>);
    };
    (@one $t:tt lookup) => {
        $crate::forward_engine!(@fwd $t lookup(key: &[u8]) -> $crate::Result<$crate::LocalLookup>);
    };
    (@one $t:tt advance_watermark) => {
        $crate::forward_engine!(@fwd $t
            advance_watermark(w: u64) -> $crate::Result<$crate::WatermarkUpdate>);
    };
    (@one $t:tt adopt_lake_watermark) => {
        $crate::forward_engine!(@fwd $t
            adopt_lake_watermark(lake_end: u64) -> $crate::Result<$crate::WatermarkUpdate>);
    };
    (@one $t:tt watermark) => {
        $crate::forward_engine!(@fwd $t watermark() -> u64);
    };
    (@one $t:tt applied_end) => {
        $crate::forward_engine!(@fwd $t applied_end() -> u64);
    };
    (@one $t:tt reclaim) => {
        $crate::forward_engine!(@fwd $t reclaim() -> $crate::Result<$crate::ReclaimReport>);
    };
    (@one $t:tt reclaim_below) => {
        $crate::forward_engine!(@fwd $t
            reclaim_below(threshold: u64) -> $crate::Result<$crate::ReclaimReport>);
    };
    (@one $t:tt stats) => {
        $crate::forward_engine!(@fwd $t stats() -> $crate::Result<$crate::EngineStats>);
    };
    (@one $t:tt flush) => {
        $crate::forward_engine!(@fwd $t flush() -> $crate::Result<()>);
    };
    (@one $t:tt lookup_inline) => {
        $crate::forward_engine!(@fwd $t
            lookup_inline(key: &[u8]) -> $crate::Result<Option<$crate::LocalLookup>>);
    };
    (@one $t:tt reclaimable) => {
        $crate::forward_engine!(@fwd $t reclaimable() -> $crate::Result<$crate::Reclaimable>);
    };
    (@one $t:tt wait_for_background_work) => {
        $crate::forward_engine!(@fwd $t wait_for_background_work() -> $crate::Result<()>);
    };
    (@one $t:tt verify) => {
        $crate::forward_engine!(@fwd $t verify() -> $crate::Result<$crate::VerifyReport>);
    };
}

impl<E: Engine + ?Sized> Engine for std::sync::Arc<E> {
    forward_engine!(deref);
}

impl<E: Engine + ?Sized> Engine for Box<E> {
    forward_engine!(deref);
}
