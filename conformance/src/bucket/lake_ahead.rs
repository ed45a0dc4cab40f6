//! Lake progress that runs ahead of the applied end (a replaying host, or one whose apply lags
//! its log): the lookuper serves records the store has not applied yet, and no lookup may go back
//! from the lake's newer version to an older local one.

use std::sync::Arc;

use tidemark_bucket::lake::LakeSnapshot;
use tidemark_bucket::{HistoricalBucket, Progress};
use tidemark_engine_api::{Engine, Record, WriteBatch};

use super::lakes::TestLake;
use super::support::{self, Bucket, Rng, Wal, show};
use crate::EngineFactory;

/// The bucket answers `key` with `expected`, naming the step on failure.
async fn expect<F: EngineFactory>(bucket: &Bucket, key: &[u8], expected: Option<&str>, when: &str) {
    let got = bucket
        .lookup(key)
        .await
        .unwrap_or_else(|e| panic!("{}: {when}: lookup {}: {e}", F::NAME, show(key)));
    assert_eq!(
        got.as_deref().map(show).as_deref(),
        expected,
        "{}: {when}: key {} (W = {}, applied end {}, lake end {})",
        F::NAME,
        show(key),
        bucket.watermark(),
        bucket.engine().applied_end(),
        bucket.lake_end(),
    );
}

/// Applies the single record at `offset` of `wal`.
async fn apply_one(bucket: &Bucket, wal: &Wal, offset: u64) {
    let batch: WriteBatch = wal.records(offset, offset + 1).iter().cloned().collect();
    bucket.apply(batch).await.unwrap();
}

/// The WAL of both minimal cases: three writes of one key, the last one `last`.
fn three_writes(k: &str, first: &str, second: &str, last: Option<&str>) -> Wal {
    let third = match last {
        Some(v) => Record::put(k, v, 2),
        None => Record::delete(k, 2),
    };
    Wal::from_records(vec![
        Record::put(k, first, 0),
        Record::put(k, second, 1),
        third,
    ])
}

/// Drives one minimal case: the host applied only offset 0 when the lake commits end 3; the
/// answer must be the lake's newest (`last`) before and after reclaim and after offsets 1 and 2
/// are applied.
fn lake_ahead_minimal<F: EngineFactory, L: TestLake>(
    factory: F,
    wal: Wal,
    k: &str,
    last: Option<&str>,
) {
    support::run_fresh_on::<F, L>(factory, async |engine, lake, _reader, bucket| {
        lake.append(wal.records(0, 3)).await;
        apply_one(&bucket, &wal, 0).await;

        let snapshot = lake.commit(3).await;
        match bucket.on_lake_progress(snapshot).await.unwrap() {
            Progress::Published {
                refreshed, update, ..
            } => {
                assert!(refreshed, "{}", F::NAME);
                assert_eq!((update.current, update.moved), (1, true), "{}", F::NAME);
            }
            other => panic!("{}: {other:?}", F::NAME),
        }
        expect::<F>(&bucket, k.as_bytes(), last, "lake ahead, before reclaim").await;
        support::reclaim::<F>(&bucket).await;
        expect::<F>(&bucket, k.as_bytes(), last, "lake ahead, after reclaim").await;
        apply_one(&bucket, &wal, 1).await;
        expect::<F>(
            &bucket,
            k.as_bytes(),
            last,
            "offset 1 applied under the lake",
        )
        .await;
        assert!(bucket.stats().distrusted_local > 0, "{}", F::NAME);
        apply_one(&bucket, &wal, 2).await;
        expect::<F>(&bucket, k.as_bytes(), last, "caught up with the lake").await;

        // Caught up: the next notification of the same snapshot moves W the rest of the way.
        bucket.on_lake_progress(snapshot).await.unwrap();
        assert_eq!(engine.watermark(), 3, "{}", F::NAME);
        support::reclaim::<F>(&bucket).await;
        expect::<F>(&bucket, k.as_bytes(), last, "after the last reclaim").await;
    });
}

/// `put(a, old, 0)`, `put(a, mid, 1)`, `put(a, new, 2)`; only offset 0 applied when the lake
/// commits end 3: `a` answers `new` throughout, never `mid` once offset 1 is applied.
pub fn lake_ahead_overwrite_never_goes_back<F: EngineFactory, L: TestLake>(factory: F) {
    let wal = three_writes("a", "old", "mid", Some("new"));
    lake_ahead_minimal::<F, L>(factory, wal, "a", Some("new"));
}

/// `put(d, x, 0)`, `put(d, y, 1)`, `delete(d, 2)`; only offset 0 applied when the lake commits
/// end 3: `d` stays deleted, never `y` once offset 1 is applied.
pub fn lake_ahead_delete_stays_deleted<F: EngineFactory, L: TestLake>(factory: F) {
    let wal = three_writes("d", "x", "y", None);
    lake_ahead_minimal::<F, L>(factory, wal, "d", None);
}

const RANDOM_RECORDS: u64 = 600;
const RANDOM_KEYS: u64 = 24;

/// The host's applies trail the lake's commits by a varying amount, sometimes behind it and
/// sometimes ahead: its WAL runs ahead of both, the lake commits and notifies at random points,
/// reclaims run at random, and after every step every key answers the newest version in the WAL
/// up to the later of the applied end and the served lake end.
pub fn lake_ahead_randomised_trailing_applies<F: EngineFactory, L: TestLake>(factory: F) {
    let wal = Wal::generate(0x1A4E_A4EA, RANDOM_RECORDS, RANDOM_KEYS, 4);
    support::run_fresh_on::<F, L>(factory, async |engine, lake, _reader, bucket| {
        let mut rng = Rng::new(0x7EA1);
        let (mut logged, mut applied, mut committed) = (0u64, 0u64, 0u64);
        let (mut lake_ahead_steps, mut host_ahead_steps) = (0, 0);
        while applied < wal.len() {
            match rng.below(4) {
                // The host logs more records (the lake may commit them before they are applied).
                0 => {
                    let to = (logged + 1 + rng.below(40)).min(wal.len());
                    lake.append(wal.records(logged, to)).await;
                    logged = to;
                }
                // The host applies some of what it logged.
                1 => {
                    let to = (applied + 1 + rng.below(30)).min(logged);
                    support::replay::<F>(&bucket, &wal, applied, to).await;
                    applied = to;
                }
                // The lake commits part of the log and notifies the bucket.
                2 => {
                    let end = committed + rng.below(logged - committed + 1);
                    let snapshot = lake.commit(end).await;
                    committed = end;
                    bucket.on_lake_progress(snapshot).await.unwrap();
                }
                _ => {
                    support::reclaim::<F>(&bucket).await;
                }
            }
            let lake_end = bucket.lake_end();
            if lake_end > applied {
                lake_ahead_steps += 1;
            } else if applied > lake_end {
                host_ahead_steps += 1;
            }
            assert!(engine.watermark() <= applied.min(lake_end));
            let end = applied.max(lake_end);
            support::assert_model::<F>(&bucket, &wal, end, "randomised step").await;
        }
        assert!(
            lake_ahead_steps > 10 && host_ahead_steps > 10,
            "{}: the lake led {lake_ahead_steps} steps, the host {host_ahead_steps}",
            F::NAME
        );
        assert!(bucket.stats().distrusted_local > 0, "{}", F::NAME);
    });
}

/// The lake runs ahead of the applied end, then the process stops and restarts: recovery from
/// the committed snapshot adopts its end, the host replays from the returned offset, and every
/// lookup before the stop, after the restart and after the replay answers the newest version in
/// the WAL up to the later of the two ends.
pub fn lake_ahead_across_restart<F: EngineFactory, L: TestLake>(factory: F) {
    let site = support::Site::new(factory);
    let wal = Wal::generate(0xA4EAD, 160, 20, 4);
    support::runtime().block_on(async {
        let lake = L::create().await;
        lake.append(wal.records(0, 160)).await;
        {
            let engine = site.open();
            let bucket = HistoricalBucket::new(Arc::clone(&engine), lake.reader());
            bucket.recover(LakeSnapshot::default()).await.unwrap();
            support::replay::<F>(&bucket, &wal, 0, 40).await;
            support::progress::<F>(&bucket, &lake, 30).await;
            support::reclaim::<F>(&bucket).await;
            support::replay::<F>(&bucket, &wal, 40, 60).await;
            // The lake overtakes the host.
            support::progress::<F>(&bucket, &lake, 120).await;
            assert_eq!(engine.watermark(), 60, "{}", F::NAME);
            support::reclaim_and_assert_model::<F>(&bucket, &wal, 120, "lake ahead").await;
            support::replay::<F>(&bucket, &wal, 60, 90).await;
            support::assert_model::<F>(&bucket, &wal, 120, "partly replayed").await;
            bucket.close().await.unwrap();
        }
        let engine = site.open();
        let bucket = HistoricalBucket::new(Arc::clone(&engine), lake.reader());
        let committed = lake.latest().await;
        let replay_from = bucket.recover(committed).await.unwrap();
        assert_eq!(replay_from, 120, "{}", F::NAME);
        support::assert_model::<F>(&bucket, &wal, 120, "restarted").await;
        support::replay::<F>(&bucket, &wal, replay_from, 140).await;
        support::assert_model::<F>(&bucket, &wal, 140, "replayed past the lake").await;
        support::progress::<F>(&bucket, &lake, 150).await;
        support::replay::<F>(&bucket, &wal, 140, 160).await;
        support::reclaim_and_assert_model::<F>(&bucket, &wal, 160, "caught up").await;
    });
}
