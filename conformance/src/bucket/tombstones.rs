//! Values and tombstones on both sides of the watermark, before and after cleanup.

use tidemark_engine_api::{Engine, LocalLookup, Record};

use super::support::{self, Wal};
use crate::EngineFactory;

/// The hand-written WAL: every kind of key history around `W = 10`, then `W = 16`. The record at
/// offset `o` is the `o`-th word: `k` puts `k@o`, `-k` deletes `k`.
fn wal() -> Wal {
    let history = "below deleted-below -deleted-below rewritten deleted-above -tombstone-only \
                   kept-below filler-7 filler-8 filler-9 rewritten -deleted-above above \
                   deleted-later -deleted-later below";
    let records = history
        .split_whitespace()
        .zip(0u64..)
        .map(|(word, offset)| match word.strip_prefix('-') {
            Some(key) => Record::delete(key, offset),
            None => Record::put(word, format!("{word}@{offset}"), offset),
        });
    Wal::from_records(records.collect())
}

fn local(bucket: &support::Bucket, key: &str) -> LocalLookup {
    bucket.engine().lookup(key.as_bytes()).unwrap()
}

/// Values and tombstones below and above `W`: before cleanup every answer is local; after the
/// covered entries are reclaimed, covered values come from the lake, a reclaimed tombstone still
/// reads as deleted (the lake answers), and a local tombstone above `W` wins over an older lake
/// value. Then `W` passes everything, all is reclaimed, and the lake answers every key.
pub fn values_and_tombstones_across_watermark<F: EngineFactory>(factory: F) {
    let wal = wal();
    support::run_fresh(factory, async |engine, lake, bucket| {
        support::write::<F>(&bucket, &lake, &wal, 0, wal.len()).await;
        let end = wal.len();

        // W = 10: nothing reclaimed yet, every written key answers locally.
        let s1 = support::progress::<F>(&bucket, &lake, 10).await;
        assert_eq!(engine.watermark(), 10);
        support::assert_model::<F>(&bucket, &wal, end, "W = 10, before reclaim").await;
        let before = bucket.stats();
        assert_eq!(
            before.lake_fallbacks, 1,
            "only the never-written key goes to the lake"
        );
        assert_eq!(before.local_tombstones, 4);

        let report = support::reclaim::<F>(&bucket).await;
        // Covered: tombstones deleted-below@2 and tombstone-only@5, values kept-below@6 and
        // filler 7..9. (below@0, rewritten@3 and deleted-above@4 were already replaced.)
        assert_eq!((report.values_removed, report.tombstones_removed), (4, 2));
        assert_eq!(local(&bucket, "deleted-below"), LocalLookup::Miss);
        assert_eq!(local(&bucket, "tombstone-only"), LocalLookup::Miss);
        assert_eq!(local(&bucket, "kept-below"), LocalLookup::Miss);
        assert_eq!(
            local(&bucket, "deleted-above"),
            LocalLookup::Tombstone { offset: 11 }
        );
        // The lake still has the value the local tombstone above W deletes.
        assert_eq!(
            lake.value_at(s1.id, b"deleted-above").unwrap(),
            Some(b"deleted-above@4".to_vec())
        );
        support::assert_model::<F>(&bucket, &wal, end, "W = 10, after reclaim").await;
        let after = bucket.stats();
        // kept-below, deleted-below, tombstone-only, fillers and the absent key.
        assert_eq!(after.lake_fallbacks - before.lake_fallbacks, 7);
        assert_eq!(after.local_tombstones - before.local_tombstones, 2);

        // W = 16 covers everything: the deleted keys stay deleted with their tombstones gone.
        support::progress::<F>(&bucket, &lake, 16).await;
        let report = support::reclaim::<F>(&bucket).await;
        // below@15, rewritten@10, above@12 and the tombstones deleted-above@11, deleted-later@14.
        assert_eq!((report.values_removed, report.tombstones_removed), (3, 2));
        for key in wal.keys() {
            assert_eq!(engine.lookup(&key).unwrap(), LocalLookup::Miss);
        }
        support::assert_model::<F>(&bucket, &wal, end, "W = 16, after reclaim").await;

        // New writes above W answer locally again.
        let more = Wal::from_records(
            wal.records(0, end)
                .iter()
                .cloned()
                .chain([Record::put("deleted-later", "deleted-later@16", 16)])
                .collect(),
        );
        support::write::<F>(&bucket, &lake, &more, 16, 17).await;
        assert_eq!(
            bucket.lookup(b"deleted-later").await.unwrap(),
            Some(b"deleted-later@16".to_vec())
        );
        support::assert_model::<F>(&bucket, &more, 17, "after a write above W").await;
        assert_eq!(bucket.stats().lake_behind, 0);
    });
}
