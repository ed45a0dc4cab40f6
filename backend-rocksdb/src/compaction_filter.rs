//! RocksDB's *tag-threshold* compaction filter.
//!
//! The decision for each entry is the disk toolkit's shared [`ThresholdPolicy`](tidemark_disk::compaction_policy::ThresholdPolicy): remove when
//! `tag + distance <= limit`, the limit read from a [`ThresholdSupplier`](tidemark_disk::compaction_policy::ThresholdSupplier) **once per
//! compaction**, in [`CompactionFilterFactory::create`]. This module only maps that decision to
//! RocksDB's [`Decision`] and counts manual and automatic compactions.
//!
//! What the tag *means* is up to the supplier: the watermark supplier treats it as a WAL offset
//! ([`crate::suppliers::watermark_supplier`], with the retention distance folded into its limit
//! and distance 0), the TTL supplier as a write time in milliseconds
//! ([`crate::suppliers::wall_clock_ms_supplier`]). The filter itself knows neither.
//!
//! The policy keeps unreadable entries, checks its arithmetic and catches panics in the supplier
//! and in every per-entry decision, so nothing unwinds into RocksDB's C++ compaction threads
//! (which would abort the process).

use std::ffi::CStr;

use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};

tidemark_disk::tag_threshold_filter_types!();

impl CompactionFilterFactory for TagThresholdFilterFactory {
    type Filter = TagThresholdFilter;

    fn create(&mut self, context: CompactionFilterContext) -> TagThresholdFilter {
        self.rule
            .counters()
            .record_compaction(context.is_manual_compaction);
        self.start()
    }

    fn name(&self) -> &CStr {
        c"tidemark.TagThresholdFilterFactory"
    }
}

impl CompactionFilter for TagThresholdFilter {
    fn filter(&mut self, _level: u32, key: &[u8], value: &[u8]) -> Decision {
        if self.removes(key, value) {
            Decision::Remove
        } else {
            Decision::Keep
        }
    }

    fn name(&self) -> &CStr {
        c"tidemark.TagThresholdFilter"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use tidemark_disk::compaction_policy::ThresholdSupplier;
    use tidemark_engine_api::codec::encode_value;

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
}
