//! A general *tag-threshold* compaction filter.
//!
//! Every stored value starts with a kind byte and an 8-byte big-endian tag (see
//! [`engine_api::codec`]). The filter removes an entry when `tag + distance <= limit`, where
//! `limit` comes from a caller-supplied [`ThresholdSupplier`]. The supplier is read **once per
//! compaction**, in [`CompactionFilterFactory::create`], so one compaction applies one consistent
//! limit and a compaction that starts after the limit moves sees the new one.
//!
//! What the tag *means* is up to the supplier: the watermark supplier treats it as a WAL offset
//! ([`crate::suppliers::watermark_supplier`], with the retention distance folded into its limit
//! and distance 0), the TTL supplier as a write time in milliseconds
//! ([`crate::suppliers::wall_clock_ms_supplier`]). The filter itself knows neither.
//!
//! Safety rules, because the filter runs inside RocksDB's C++ compaction threads:
//! - an entry whose tag cannot be read is **kept** and counted, never removed;
//! - `tag + distance` is checked arithmetic: an overflow keeps the entry;
//! - the supplier call and every per-entry decision run under `catch_unwind`, so a panic never
//!   unwinds into C++ (which would abort the process): the entry is kept and the panic counted.

use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use engine_api::codec;
use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};

/// Returns the current limit, or `None` to remove nothing. Read once per compaction.
pub type ThresholdSupplier = Arc<dyn Fn() -> Option<u64> + Send + Sync>;

/// Extracts the tag from a key and its stored bytes; `None` means unreadable (the entry is kept
/// and counted).
pub type TagReader = fn(&[u8], &[u8]) -> Option<u64>;

/// Lock-free counters shared by a factory and every filter it creates.
#[derive(Debug, Default)]
pub struct FilterCounters {
    removed_values: AtomicU64,
    removed_tombstones: AtomicU64,
    kept_corrupt: AtomicU64,
    panics: AtomicU64,
    supplier_reads: AtomicU64,
    manual_compactions: AtomicU64,
    automatic_compactions: AtomicU64,
}

/// A copy of [`FilterCounters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterCounterSnapshot {
    /// Values (kind byte `0x01`) removed.
    pub removed_values: u64,
    /// Tombstones (kind byte `0x02`) removed.
    pub removed_tombstones: u64,
    /// Entries whose tag could not be read, kept.
    pub kept_corrupt: u64,
    /// Panics caught in the supplier or in a per-entry decision (the entry was kept).
    pub panics: u64,
    /// Times the supplier was read (once per compaction).
    pub supplier_reads: u64,
    /// Filters created for manual compactions (`compact_range`).
    pub manual_compactions: u64,
    /// Filters created for RocksDB's own background compactions.
    pub automatic_compactions: u64,
}

impl FilterCounters {
    /// A copy of the counters.
    pub fn snapshot(&self) -> FilterCounterSnapshot {
        FilterCounterSnapshot {
            removed_values: self.removed_values.load(Ordering::Relaxed),
            removed_tombstones: self.removed_tombstones.load(Ordering::Relaxed),
            kept_corrupt: self.kept_corrupt.load(Ordering::Relaxed),
            panics: self.panics.load(Ordering::Relaxed),
            supplier_reads: self.supplier_reads.load(Ordering::Relaxed),
            manual_compactions: self.manual_compactions.load(Ordering::Relaxed),
            automatic_compactions: self.automatic_compactions.load(Ordering::Relaxed),
        }
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl FilterCounterSnapshot {
    /// What happened between `earlier` and `self` (saturating, so never negative).
    pub fn since(&self, earlier: &FilterCounterSnapshot) -> FilterCounterSnapshot {
        FilterCounterSnapshot {
            removed_values: self.removed_values.saturating_sub(earlier.removed_values),
            removed_tombstones: self
                .removed_tombstones
                .saturating_sub(earlier.removed_tombstones),
            kept_corrupt: self.kept_corrupt.saturating_sub(earlier.kept_corrupt),
            panics: self.panics.saturating_sub(earlier.panics),
            supplier_reads: self.supplier_reads.saturating_sub(earlier.supplier_reads),
            manual_compactions: self
                .manual_compactions
                .saturating_sub(earlier.manual_compactions),
            automatic_compactions: self
                .automatic_compactions
                .saturating_sub(earlier.automatic_compactions),
        }
    }
}

/// Builds one [`TagThresholdFilter`] per compaction, reading the supplier once for each.
///
/// Install it with `Options::set_compaction_filter_factory` on the column family it guards.
pub struct TagThresholdFilterFactory {
    distance: u64,
    supplier: ThresholdSupplier,
    tag_reader: TagReader,
    counters: Arc<FilterCounters>,
}

impl TagThresholdFilterFactory {
    /// A factory removing entries with `tag + distance <= supplier()`, reading tags with
    /// [`codec::checked_tag`] (an entry whose checksum fails is kept and counted, never removed
    /// on a damaged tag) and counting into fresh counters.
    pub fn new(distance: u64, supplier: ThresholdSupplier) -> Self {
        TagThresholdFilterFactory {
            distance,
            supplier,
            tag_reader: codec::checked_tag,
            counters: Arc::default(),
        }
    }

    /// Counts into `counters` (shared with whoever else holds them).
    pub fn with_counters(mut self, counters: Arc<FilterCounters>) -> Self {
        self.counters = counters;
        self
    }

    /// Reads tags with `reader` instead of [`codec::checked_tag`] (tests use this to inject panics;
    /// other stored layouts could use it to place the tag elsewhere).
    pub fn with_tag_reader(mut self, reader: TagReader) -> Self {
        self.tag_reader = reader;
        self
    }

    /// The shared counters.
    pub fn counters(&self) -> Arc<FilterCounters> {
        Arc::clone(&self.counters)
    }

    fn read_limit(&self) -> Option<u64> {
        FilterCounters::bump(&self.counters.supplier_reads);
        let supplier = &self.supplier;
        match catch_unwind(AssertUnwindSafe(|| supplier())) {
            Ok(limit) => limit,
            Err(_) => {
                // A broken supplier must not take the process down; removing nothing is safe.
                FilterCounters::bump(&self.counters.panics);
                tracing::error!("tag-threshold supplier panicked; this compaction removes nothing");
                None
            }
        }
    }
}

impl CompactionFilterFactory for TagThresholdFilterFactory {
    type Filter = TagThresholdFilter;

    fn create(&mut self, context: CompactionFilterContext) -> TagThresholdFilter {
        if context.is_manual_compaction {
            FilterCounters::bump(&self.counters.manual_compactions);
        } else {
            FilterCounters::bump(&self.counters.automatic_compactions);
        }
        TagThresholdFilter {
            limit: self.read_limit(),
            distance: self.distance,
            tag_reader: self.tag_reader,
            counters: Arc::clone(&self.counters),
        }
    }

    fn name(&self) -> &CStr {
        c"tidemark.TagThresholdFilterFactory"
    }
}

/// What the filter decided for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Below the limit: keep.
    Keep,
    /// A value at or past the limit: remove.
    RemoveValue,
    /// A tombstone at or past the limit: remove.
    RemoveTombstone,
    /// The tag could not be read: keep and count.
    KeepCorrupt,
}

/// Decides one entry: remove when `tag + distance <= limit` (checked: an overflow keeps it).
pub fn entry_verdict(
    limit: Option<u64>,
    distance: u64,
    tag: Option<u64>,
    stored: &[u8],
) -> Verdict {
    let Some(tag) = tag else {
        return Verdict::KeepCorrupt;
    };
    let expired = match (limit, tag.checked_add(distance)) {
        (Some(limit), Some(due)) => due <= limit,
        _ => false,
    };
    match (expired, codec::is_tombstone_kind(stored)) {
        (false, _) => Verdict::Keep,
        (true, true) => Verdict::RemoveTombstone,
        (true, false) => Verdict::RemoveValue,
    }
}

/// The filter for one compaction run: holds the limit read when the compaction started.
pub struct TagThresholdFilter {
    limit: Option<u64>,
    distance: u64,
    tag_reader: TagReader,
    counters: Arc<FilterCounters>,
}

impl TagThresholdFilter {
    /// The limit this compaction applies (`None`: remove nothing).
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }
}

impl CompactionFilter for TagThresholdFilter {
    fn filter(&mut self, _level: u32, key: &[u8], value: &[u8]) -> Decision {
        let (limit, distance, reader) = (self.limit, self.distance, self.tag_reader);
        let verdict = catch_unwind(AssertUnwindSafe(|| {
            entry_verdict(limit, distance, reader(key, value), value)
        }));
        let counters = &self.counters;
        match verdict {
            Ok(Verdict::Keep) => Decision::Keep,
            Ok(Verdict::RemoveValue) => {
                FilterCounters::bump(&counters.removed_values);
                Decision::Remove
            }
            Ok(Verdict::RemoveTombstone) => {
                FilterCounters::bump(&counters.removed_tombstones);
                Decision::Remove
            }
            Ok(Verdict::KeepCorrupt) => {
                FilterCounters::bump(&counters.kept_corrupt);
                Decision::Keep
            }
            Err(_) => {
                FilterCounters::bump(&counters.panics);
                Decision::Keep
            }
        }
    }

    fn name(&self) -> &CStr {
        c"tidemark.TagThresholdFilter"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_api::codec::{encode_tombstone, encode_value};

    #[test]
    fn removes_at_or_past_the_limit_only() {
        let v = encode_value(b"k", 5, b"x");
        assert_eq!(entry_verdict(Some(5), 0, Some(5), &v), Verdict::RemoveValue);
        assert_eq!(entry_verdict(Some(4), 0, Some(5), &v), Verdict::Keep);
        assert_eq!(entry_verdict(Some(7), 2, Some(5), &v), Verdict::RemoveValue);
        assert_eq!(entry_verdict(Some(6), 2, Some(5), &v), Verdict::Keep);
        let t = encode_tombstone(b"k", 5);
        assert_eq!(
            entry_verdict(Some(9), 0, Some(5), &t),
            Verdict::RemoveTombstone
        );
    }

    #[test]
    fn none_limit_overflow_and_unreadable_keep() {
        let v = encode_value(b"k", u64::MAX, b"x");
        assert_eq!(entry_verdict(None, 0, Some(0), &v), Verdict::Keep);
        assert_eq!(
            entry_verdict(Some(u64::MAX), 1, Some(u64::MAX), &v),
            Verdict::Keep
        );
        assert_eq!(
            entry_verdict(Some(u64::MAX), u64::MAX, Some(1), &v),
            Verdict::Keep
        );
        assert_eq!(
            entry_verdict(Some(u64::MAX), 0, None, b"\xff"),
            Verdict::KeepCorrupt
        );
    }

    #[test]
    fn panics_are_caught_and_counted() {
        let supplier: ThresholdSupplier = Arc::new(|| panic!("supplier boom"));
        let mut factory = TagThresholdFilterFactory::new(0, supplier);
        let mut filter = factory.create(CompactionFilterContext {
            is_full_compaction: true,
            is_manual_compaction: true,
        });
        assert_eq!(filter.limit(), None);
        assert!(matches!(
            filter.filter(0, b"k", &encode_value(b"k", 1, b"v")),
            Decision::Keep
        ));

        let mut factory = TagThresholdFilterFactory::new(0, Arc::new(|| Some(100)))
            .with_tag_reader(|_, _| panic!("reader boom"));
        let mut filter = factory.create(CompactionFilterContext {
            is_full_compaction: false,
            is_manual_compaction: false,
        });
        assert!(matches!(
            filter.filter(0, b"k", &encode_value(b"k", 1, b"v")),
            Decision::Keep
        ));
        let c = factory.counters().snapshot();
        assert_eq!((c.panics, c.removed_values, c.supplier_reads), (1, 0, 1));
        assert_eq!(c.automatic_compactions, 1);
    }

    #[test]
    fn snapshot_delta_saturates() {
        let later = FilterCounterSnapshot {
            removed_values: 3,
            ..Default::default()
        };
        let earlier = FilterCounterSnapshot {
            removed_values: 1,
            panics: 2,
            ..Default::default()
        };
        let d = later.since(&earlier);
        assert_eq!((d.removed_values, d.panics), (2, 0));
    }
}
