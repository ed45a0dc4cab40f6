//! fjall's *tag-threshold* compaction filter.
//!
//! The decision for each entry is the disk toolkit's shared [`ThresholdPolicy`](tidemark_disk::compaction_policy::ThresholdPolicy): remove when
//! `tag + distance <= limit`, the limit read from a [`ThresholdSupplier`](tidemark_disk::compaction_policy::ThresholdSupplier) **once per
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

use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};

tidemark_disk::tag_threshold_filter_types!();

impl Factory for TagThresholdFilterFactory {
    fn name(&self) -> &str {
        "tidemark.TagThresholdFilterFactory"
    }

    fn make_filter(&self, _context: &Context) -> Box<dyn CompactionFilter> {
        Box::new(self.start())
    }
}

impl CompactionFilter for TagThresholdFilter {
    fn filter_item(
        &mut self,
        item: ItemAccessor<'_>,
        _context: &Context,
    ) -> CompactionFilterResult {
        let key = item.key();
        Ok(self.verdict(key, item))
    }
}

impl TagThresholdFilter {
    /// The verdict on `item`, stored for the bucket key `key` (a bucket's keyspace stores some
    /// keys escaped, and a value's checksum covers the bucket's key).
    pub(crate) fn verdict(&self, key: &[u8], item: ItemAccessor<'_>) -> Verdict {
        match catch_unwind(AssertUnwindSafe(|| item.value())) {
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
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use tidemark_disk::compaction_policy::ThresholdSupplier;
    use tidemark_engine_api::codec::{encode_tombstone, encode_value};

    #[test]
    fn panics_are_caught_and_counted() {
        let supplier: ThresholdSupplier = Arc::new(|| panic!("supplier boom"));
        let factory = TagThresholdFilterFactory::new(0, supplier);
        let filter = factory.start();
        assert_eq!(filter.limit(), None);
        assert!(!filter.removes(b"k", &encode_value(b"k", 1, b"v")));

        let factory = TagThresholdFilterFactory::new(0, Arc::new(|| Some(100)))
            .with_tag_reader(|_, _| panic!("reader boom"));
        assert!(!factory.start().removes(b"k", &encode_value(b"k", 1, b"v")));
        let c = factory.counters().snapshot();
        assert_eq!((c.panics, c.removed_values, c.supplier_reads), (1, 0, 1));
    }

    #[test]
    fn reads_the_supplier_once_per_filter() {
        let factory = TagThresholdFilterFactory::new(0, Arc::new(|| Some(5)));
        let filter = factory.start();
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
