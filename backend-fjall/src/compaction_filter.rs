//! fjall's *tag-threshold* compaction filter.
//!
//! The decision for each entry is the disk toolkit's shared [`ThresholdPolicy`]: remove when
//! `tag + distance <= limit`, the limit read from a [`ThresholdSupplier`] **once per
//! compaction**, in [`Factory::make_filter`]. This module maps it to fjall's [`Verdict`]:
//!
//! - a removal is always [`Verdict::Remove`], which leaves a tombstone until the last level, so
//!   an older version of the key in a lower level never reappears (`RemoveWeak` and `Destroy`
//!   could resurrect it);
//! - fjall runs filters in compactions only, never in flushes, and never hands them tombstones:
//!   Tidemark's tombstones are tagged values, so the filter sees and removes them like values;
//! - a value fjall cannot read (a failed read of a separated value) is kept and counted, rather
//!   than aborting the compaction, and a panic while reading it is caught, kept and counted, so
//!   nothing unwinds into fjall's workers (the policy already catches panics in the supplier
//!   and the tag reader).
//!
//! fjall's filter context says whether the output is the last level but not whether the
//! compaction was requested, so the manual and automatic compaction counters stay at zero here.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};
use tidemark_disk::compaction_policy::{
    FilterCounters, TagReader, ThresholdPolicy, ThresholdRule, ThresholdSupplier,
};

/// Builds one [`TagThresholdFilter`] per compaction, reading the supplier once for each.
///
/// Install it for the keyspace it guards through
/// `Database::builder(..).with_compaction_filter_factories(..)`.
pub struct TagThresholdFilterFactory {
    rule: ThresholdRule,
}

impl TagThresholdFilterFactory {
    /// A factory removing entries with `tag + distance <= supplier()` ([`ThresholdRule::new`]).
    pub fn new(distance: u64, supplier: ThresholdSupplier) -> Self {
        TagThresholdFilterFactory {
            rule: ThresholdRule::new(distance, supplier),
        }
    }

    /// Counts into `counters` ([`ThresholdRule::with_counters`]).
    pub fn with_counters(self, counters: Arc<FilterCounters>) -> Self {
        TagThresholdFilterFactory {
            rule: self.rule.with_counters(counters),
        }
    }

    /// Reads tags with `reader` ([`ThresholdRule::with_tag_reader`]).
    pub fn with_tag_reader(self, reader: TagReader) -> Self {
        TagThresholdFilterFactory {
            rule: self.rule.with_tag_reader(reader),
        }
    }

    /// The shared counters.
    pub fn counters(&self) -> Arc<FilterCounters> {
        Arc::clone(self.rule.counters())
    }

    /// The filter for one compaction, with the supplier read now.
    pub fn filter(&self) -> TagThresholdFilter {
        TagThresholdFilter {
            policy: self.rule.start_compaction(),
        }
    }
}

impl Factory for TagThresholdFilterFactory {
    fn name(&self) -> &str {
        "tidemark.TagThresholdFilterFactory"
    }

    fn make_filter(&self, _context: &Context) -> Box<dyn CompactionFilter> {
        Box::new(self.filter())
    }
}

/// The filter for one compaction run: holds the policy with the limit read when it started.
pub struct TagThresholdFilter {
    policy: ThresholdPolicy,
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

impl CompactionFilter for TagThresholdFilter {
    fn filter_item(
        &mut self,
        item: ItemAccessor<'_>,
        _context: &Context,
    ) -> CompactionFilterResult {
        let key = item.key();
        let verdict = match catch_unwind(AssertUnwindSafe(|| item.value())) {
            Ok(Ok(stored)) if self.policy.removes(key, &stored) => Verdict::Remove,
            Ok(Ok(_)) => Verdict::Keep,
            Ok(Err(_)) => {
                self.policy.keep_unreadable();
                Verdict::Keep
            }
            Err(_) => {
                self.policy.keep_after_panic();
                Verdict::Keep
            }
        };
        Ok(verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_engine_api::codec::{encode_tombstone, encode_value};

    #[test]
    fn panics_are_caught_and_counted() {
        let supplier: ThresholdSupplier = Arc::new(|| panic!("supplier boom"));
        let factory = TagThresholdFilterFactory::new(0, supplier);
        let filter = factory.filter();
        assert_eq!(filter.limit(), None);
        assert!(!filter.removes(b"k", &encode_value(b"k", 1, b"v")));

        let factory = TagThresholdFilterFactory::new(0, Arc::new(|| Some(100)))
            .with_tag_reader(|_, _| panic!("reader boom"));
        assert!(!factory.filter().removes(b"k", &encode_value(b"k", 1, b"v")));
        let c = factory.counters().snapshot();
        assert_eq!((c.panics, c.removed_values, c.supplier_reads), (1, 0, 1));
    }

    #[test]
    fn reads_the_supplier_once_per_filter() {
        let factory = TagThresholdFilterFactory::new(0, Arc::new(|| Some(5)));
        let filter = factory.filter();
        assert!(filter.removes(b"a", &encode_value(b"a", 5, b"v")));
        assert!(filter.removes(b"b", &encode_tombstone(b"b", 1)));
        assert!(!filter.removes(b"c", &encode_value(b"c", 6, b"v")));
        let c = factory.counters().snapshot();
        assert_eq!(
            (c.removed_values, c.removed_tombstones, c.supplier_reads),
            (1, 1, 1)
        );
    }
}
