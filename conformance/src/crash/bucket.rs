//! The bucket-level crash child: a `HistoricalBucket` over the backend with the reclaim
//! scheduler running and a lake whose commits persist (`crash::lake`). After a kill it reopens
//! the engine, checks it against what was acknowledged, recovers from the lake's latest committed
//! snapshot, replays the host's WAL from the offset `recover` returns and checks every key through
//! the bucket's lookups (local entries and lake fallback) against the model; then it goes on
//! writing, committing lake snapshots that trail the applied end and notifying the bucket.

use std::sync::Arc;

use tidemark_bucket::{HistoricalBucket, LakeLookuper};
use tidemark_engine_api::{Engine, EngineHandle};
use tidemark_test_support::rng::SplitMix64;

use super::lake::PersistedLake;
use super::{
    ChildEnv, KEYS, batch_at, check_progress, model_below, next_boundary, open_store,
    to_write_batch,
};
use crate::bucket::support::{BUCKET, runtime, scheduler};
use crate::factory::EngineFactory;

/// The bucket crash test (module docs of [`crate::crash`]).
pub fn run<F: EngineFactory>(test_name: &str, factory: &F) {
    super::run(test_name, |env| child_main(factory, env));
}

fn child_main<F: EngineFactory>(factory: &F, env: ChildEnv) {
    let seed = env.seed;
    let acked = env.acked;
    // libtest has printed "test <name> ... " without a newline: end that line, so the first
    // report line the parent reads starts with its own word.
    println!();
    let engine = open_store(factory, &env.dir);
    let (end, w) = (engine.applied_end(), engine.watermark());
    // The keys are checked after the replay, against the model at the WAL's end.
    check_progress(end, w, seed, acked);
    let mut lake = PersistedLake::open(&env.dir, seed);
    let committed = lake.lake().latest().unwrap_or_default();
    assert!(
        committed.end_offset >= acked.lake_end,
        "the lake lost a commit that returned: latest end {}, acknowledged {} (seed {seed})",
        committed.end_offset,
        acked.lake_end
    );
    assert!(
        w <= committed.end_offset,
        "W {w} is above the lake's latest committed end {}: published before the lake held it \
         (seed {seed})",
        committed.end_offset
    );
    // The host logged the batch in flight before applying it: the WAL reaches its end.
    let wal_end = next_boundary(seed, acked.end).max(end);
    lake.append_up_to(wal_end);

    let runtime = runtime();
    runtime.block_on(async {
        let scheduler = scheduler();
        let lookuper: Arc<dyn LakeLookuper> = lake.lake().clone();
        let bucket = HistoricalBucket::new(EngineHandle::new(engine), lookuper)
            .with_scheduler(&scheduler, BUCKET)
            .expect("register with the scheduler");
        let replay_from = bucket
            .recover(committed)
            .await
            .unwrap_or_else(|e| panic!("recover after a kill: {e} (seed {seed})"));
        let (a, w) = (bucket.engine().applied_end(), bucket.watermark());
        assert_eq!(
            replay_from,
            a.max(w),
            "recover's replay offset (seed {seed})"
        );
        assert!(w >= committed.end_offset, "recover adopts the lake's end");
        // Adopting may move W to a commit the killed child made durable but did not report:
        // from here on it is this child's acknowledged watermark.
        println!("WREQ {w}");
        println!("WACK {w}");
        replay(&bucket, seed, replay_from, wal_end).await;
        check_lookups(&bucket, seed, wal_end).await;
        println!("VERIFIED {wal_end} {}", bucket.watermark());
        if env.verify_only {
            return;
        }
        let mut rng = SplitMix64::new(env.child_seed);
        loop {
            let first = bucket.engine().applied_end();
            let records = batch_at(seed, first);
            lake.append_up_to(first + records.len() as u64);
            let outcome = bucket
                .apply(to_write_batch(&records))
                .await
                .unwrap_or_else(|e| panic!("apply at {first}: {e}"));
            println!("ACK {}", outcome.applied_end);
            if rng.below(3) == 0 {
                let latest = lake.lake().latest().map_or(0, |s| s.end_offset);
                let end = outcome
                    .applied_end
                    .saturating_sub(rng.below(150))
                    .max(latest);
                let snapshot = lake.commit(end);
                println!("LAKE {end}");
                bucket
                    .on_lake_progress(snapshot)
                    .await
                    .unwrap_or_else(|e| panic!("lake progress to {end}: {e}"));
                println!("WACK {}", bucket.watermark());
            }
        }
    });
}

/// Re-applies the stream's records in `from..to` (the host's WAL replay), batch by batch.
async fn replay(bucket: &HistoricalBucket, seed: u64, from: u64, to: u64) {
    let mut first = 0;
    while first < to {
        let batch = batch_at(seed, first);
        first += batch.len() as u64;
        let tail: Vec<_> = batch.into_iter().filter(|r| r.offset >= from).collect();
        if !tail.is_empty() {
            bucket
                .apply(to_write_batch(&tail))
                .await
                .unwrap_or_else(|e| panic!("replay from {from}: {e} (seed {seed})"));
        }
    }
}

/// Every key through the bucket: the newest record below `end` (a tombstone reads as absent).
async fn check_lookups(bucket: &HistoricalBucket, seed: u64, end: u64) {
    let model = model_below(seed, end);
    for k in 0..KEYS {
        let key = super::key(k);
        let expected = model.newest.get(&key).and_then(|r| r.value.clone());
        let found = bucket
            .lookup(&key)
            .await
            .unwrap_or_else(|e| panic!("bucket lookup {k} after a kill: {e} (seed {seed})"));
        assert!(
            found == expected,
            "key {k} through the bucket after a kill: found {:?}, the newest record is {:?} \
             (W {}, lake end {}, seed {seed})",
            found.as_deref().map(String::from_utf8_lossy),
            expected.as_deref().map(String::from_utf8_lossy),
            bucket.watermark(),
            bucket.lake_end()
        );
    }
}
