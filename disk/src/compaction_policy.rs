//! The *tag-threshold* decision every LSM backend's compaction filter applies.
//!
//! Every stored value starts with a kind byte and an 8-byte big-endian tag (see
//! [`tidemark_engine_api::codec`]). An entry is removed when `tag + distance <= limit`, where `limit`
//! comes from a caller-supplied [`ThresholdSupplier`] read **once per compaction**
//! ([`ThresholdPolicy::for_compaction`]), so one compaction applies one consistent limit and a
//! compaction that starts after the limit moves sees the new one.
//!
//! A backend's filter only translates the yes/no of [`ThresholdPolicy::removes`] into its
//! engine's decision type; the policy itself, shared by every LSM backend, holds the safety
//! rules, because filters run inside the engine's own compaction threads:
//! - an entry whose tag cannot be read is **kept** and counted, never removed;
//! - `tag + distance` is checked arithmetic: an overflow keeps the entry;
//! - the supplier call and every per-entry decision run under `catch_unwind`, so a panic never
//!   unwinds into the engine's workers (or into C++, which would abort the process): the entry
//!   is kept and the panic counted.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tidemark_engine_api::codec;

use crate::ReclaimWork;

/// Returns the current limit, or `None` to remove nothing. Read once per compaction.
pub type ThresholdSupplier = Arc<dyn Fn() -> Option<u64> + Send + Sync>;

/// Extracts the tag from a key and its stored bytes; `None` means unreadable (the entry is kept
/// and counted).
pub type TagReader = fn(&[u8], &[u8]) -> Option<u64>;

/// Lock-free counters shared by a filter factory and every filter it creates.
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
    /// Filters created for compactions the engine was asked for (a manual or major compaction).
    pub manual_compactions: u64,
    /// Filters created for the engine's own background compactions.
    pub automatic_compactions: u64,
}

impl FilterCounterSnapshot {
    /// What a reclaim did, from these counters' change over it (values and tombstones removed,
    /// unreadable entries kept) and the store's sizes, which the backend measures; a panic the
    /// filter caught meanwhile is logged against `store`, the entries it met having been kept.
    pub fn reclaim_work(
        &self,
        store: &Path,
        bytes_before: u64,
        bytes_after: u64,
        bytes_rewritten: Option<u64>,
    ) -> ReclaimWork {
        if self.panics > 0 {
            tracing::error!(
                panics = self.panics,
                store = %store.display(),
                "compaction filter panicked; the entries were kept"
            );
        }
        ReclaimWork {
            values_removed: self.removed_values,
            tombstones_removed: self.removed_tombstones,
            corrupt_kept: self.kept_corrupt,
            bytes_before,
            bytes_after,
            bytes_rewritten,
            sweep: None,
        }
    }
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

    /// Counts one filter created, for a requested (`manual`) or a background compaction.
    pub fn record_compaction(&self, manual: bool) {
        if manual {
            bump(&self.manual_compactions);
        } else {
            bump(&self.automatic_compactions);
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
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

/// What the policy decided for one entry.
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

/// What a backend's filter factory holds: the distance, the supplier, the tag reader (by default
/// [`codec::checked_tag`]: an entry whose checksum fails is kept and counted, never removed on a
/// damaged tag) and the counters; [`ThresholdRule::start_compaction`] makes the
/// [`ThresholdPolicy`] of one compaction. Every LSM backend's factory wraps one, so their
/// defaults cannot drift apart.
pub struct ThresholdRule {
    distance: u64,
    // Only ever called under `catch_unwind` (`ThresholdPolicy::for_compaction`), so the rule is
    // unwind-safe whatever the supplier captures (fjall requires its factories to be).
    supplier: AssertUnwindSafe<ThresholdSupplier>,
    tag_reader: TagReader,
    counters: Arc<FilterCounters>,
}

impl std::fmt::Debug for ThresholdRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThresholdRule")
            .field("distance", &self.distance)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl ThresholdRule {
    /// Removes entries with `tag + distance <= supplier()`, reading tags with
    /// [`codec::checked_tag`] and counting into fresh counters.
    pub fn new(distance: u64, supplier: ThresholdSupplier) -> Self {
        ThresholdRule {
            distance,
            supplier: AssertUnwindSafe(supplier),
            tag_reader: codec::checked_tag,
            counters: Arc::default(),
        }
    }

    /// Counts into `counters` (shared with whoever else holds them).
    pub fn with_counters(mut self, counters: Arc<FilterCounters>) -> Self {
        self.counters = counters;
        self
    }

    /// Reads tags with `reader` instead of [`codec::checked_tag`] (tests use this to inject
    /// panics; other stored layouts could use it to place the tag elsewhere).
    pub fn with_tag_reader(mut self, reader: TagReader) -> Self {
        self.tag_reader = reader;
        self
    }

    /// The shared counters.
    pub fn counters(&self) -> &Arc<FilterCounters> {
        &self.counters
    }

    /// The policy of one compaction, with the supplier read now.
    pub fn start_compaction(&self) -> ThresholdPolicy {
        ThresholdPolicy::for_compaction(
            &self.supplier,
            self.distance,
            self.tag_reader,
            Arc::clone(&self.counters),
        )
    }
}

/// The decision for one compaction run: the limit read when it started, the distance, the tag
/// reader and the counters every entry's outcome goes to.
#[derive(Debug, Clone)]
pub struct ThresholdPolicy {
    limit: Option<u64>,
    distance: u64,
    tag_reader: TagReader,
    counters: Arc<FilterCounters>,
}

impl ThresholdPolicy {
    /// Starts one compaction: reads `supplier` once (a panicking supplier counts and removes
    /// nothing in this compaction).
    pub fn for_compaction(
        supplier: &ThresholdSupplier,
        distance: u64,
        tag_reader: TagReader,
        counters: Arc<FilterCounters>,
    ) -> Self {
        bump(&counters.supplier_reads);
        let limit = match catch_unwind(AssertUnwindSafe(|| supplier())) {
            Ok(limit) => limit,
            Err(_) => {
                // A broken supplier must not take the process down; removing nothing is safe.
                bump(&counters.panics);
                tracing::error!("tag-threshold supplier panicked; this compaction removes nothing");
                None
            }
        };
        ThresholdPolicy {
            limit,
            distance,
            tag_reader,
            counters,
        }
    }

    /// The limit this compaction applies (`None`: remove nothing).
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Whether the entry `key` → `stored` goes, counting the outcome. Never panics: a panic in
    /// the tag reader keeps the entry and is counted.
    pub fn removes(&self, key: &[u8], stored: &[u8]) -> bool {
        let (limit, distance, reader) = (self.limit, self.distance, self.tag_reader);
        let verdict = catch_unwind(AssertUnwindSafe(|| {
            entry_verdict(limit, distance, reader(key, stored), stored)
        }));
        let counters = &self.counters;
        match verdict {
            Ok(Verdict::Keep) => false,
            Ok(Verdict::RemoveValue) => {
                bump(&counters.removed_values);
                true
            }
            Ok(Verdict::RemoveTombstone) => {
                bump(&counters.removed_tombstones);
                true
            }
            Ok(Verdict::KeepCorrupt) => {
                bump(&counters.kept_corrupt);
                false
            }
            Err(_) => {
                bump(&counters.panics);
                false
            }
        }
    }
}

impl ThresholdPolicy {
    /// Counts an entry kept because the engine could not hand its stored bytes to the filter
    /// (e.g. a failed read of a separated value).
    pub fn keep_unreadable(&self) {
        bump(&self.counters.kept_corrupt);
    }

    /// Counts an entry kept because reading it panicked (the caller caught the panic).
    pub fn keep_after_panic(&self) {
        bump(&self.counters.panics);
    }
}

/// Defines an LSM backend's two filter types over the shared decision, so each backend writes
/// only the glue to its engine's filter traits (an engine's trait can only be implemented for a
/// type of the backend's own crate):
///
/// - `TagThresholdFilterFactory` (the [`ThresholdRule`]: `new`, `with_counters`,
///   `with_tag_reader`, `counters`, and `start`, the filter for one compaction with the supplier
///   read now);
/// - `TagThresholdFilter` (the [`ThresholdPolicy`] of one compaction: `limit`, `removes`).
///
/// ```
/// tidemark_disk::tag_threshold_filter_types!();
///
/// let factory = TagThresholdFilterFactory::new(0, std::sync::Arc::new(|| Some(10)));
/// assert_eq!(factory.start().limit(), Some(10));
/// ```
#[macro_export]
macro_rules! tag_threshold_filter_types {
    () => {
        /// Builds one [`TagThresholdFilter`] per compaction, reading the supplier once for each.
        pub struct TagThresholdFilterFactory {
            rule: $crate::compaction_policy::ThresholdRule,
        }

        impl TagThresholdFilterFactory {
            /// A factory removing entries with `tag + distance <= supplier()`.
            pub fn new(
                distance: u64,
                supplier: $crate::compaction_policy::ThresholdSupplier,
            ) -> Self {
                TagThresholdFilterFactory {
                    rule: $crate::compaction_policy::ThresholdRule::new(distance, supplier),
                }
            }

            /// Counts into `counters` (shared with whoever reads them).
            pub fn with_counters(
                self,
                counters: ::std::sync::Arc<$crate::compaction_policy::FilterCounters>,
            ) -> Self {
                TagThresholdFilterFactory {
                    rule: self.rule.with_counters(counters),
                }
            }

            /// Reads tags with `reader` instead of the value codec.
            pub fn with_tag_reader(self, reader: $crate::compaction_policy::TagReader) -> Self {
                TagThresholdFilterFactory {
                    rule: self.rule.with_tag_reader(reader),
                }
            }

            /// The shared counters.
            pub fn counters(&self) -> ::std::sync::Arc<$crate::compaction_policy::FilterCounters> {
                ::std::sync::Arc::clone(self.rule.counters())
            }

            /// The filter for one compaction, with the supplier read now.
            pub fn start(&self) -> TagThresholdFilter {
                TagThresholdFilter {
                    policy: self.rule.start_compaction(),
                }
            }
        }

        /// The filter for one compaction run: the policy with the limit read when it started.
        pub struct TagThresholdFilter {
            policy: $crate::compaction_policy::ThresholdPolicy,
        }

        impl TagThresholdFilter {
            /// The limit this compaction applies (`None`: remove nothing).
            pub fn limit(&self) -> Option<u64> {
                self.policy.limit()
            }

            /// Whether the entry `key` → `stored` goes (counted).
            pub fn removes(&self, key: &[u8], stored: &[u8]) -> bool {
                self.policy.removes(key, stored)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_engine_api::codec::{encode_tombstone, encode_value};

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
    fn policy_counts_each_outcome_and_reads_the_supplier_once() {
        let counters = Arc::new(FilterCounters::default());
        let supplier: ThresholdSupplier = Arc::new(|| Some(10));
        let policy =
            ThresholdPolicy::for_compaction(&supplier, 0, codec::checked_tag, counters.clone());
        assert_eq!(policy.limit(), Some(10));
        assert!(policy.removes(b"a", &encode_value(b"a", 3, b"v")));
        assert!(policy.removes(b"b", &encode_tombstone(b"b", 4)));
        assert!(!policy.removes(b"c", &encode_value(b"c", 11, b"v")));
        assert!(!policy.removes(b"d", b"\x01garbage"));
        let c = counters.snapshot();
        assert_eq!(
            (
                c.removed_values,
                c.removed_tombstones,
                c.kept_corrupt,
                c.supplier_reads
            ),
            (1, 1, 1, 1)
        );
    }

    #[test]
    fn panics_keep_the_entry_and_are_counted() {
        let counters = Arc::new(FilterCounters::default());
        let broken: ThresholdSupplier = Arc::new(|| panic!("supplier boom"));
        let policy =
            ThresholdPolicy::for_compaction(&broken, 0, codec::checked_tag, counters.clone());
        assert_eq!(policy.limit(), None);
        assert!(!policy.removes(b"k", &encode_value(b"k", 1, b"v")));

        let supplier: ThresholdSupplier = Arc::new(|| Some(100));
        let policy = ThresholdPolicy::for_compaction(
            &supplier,
            0,
            |_, _| panic!("reader boom"),
            counters.clone(),
        );
        assert!(!policy.removes(b"k", &encode_value(b"k", 1, b"v")));
        let c = counters.snapshot();
        assert_eq!((c.panics, c.removed_values, c.supplier_reads), (2, 0, 2));
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
