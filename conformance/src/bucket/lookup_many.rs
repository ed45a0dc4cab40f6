//! The batched read path: `lookup_many` answers every key as `lookup` does, with one lake call.

use tidemark_engine_api::Engine;

use super::support::{self, Wal, show};
use crate::EngineFactory;

/// Over values, tombstones, reclaimed keys (answered by the lake) and a key never written,
/// `lookup_many` of every key equals the model and one `lookup` per key, in order, and asks the
/// lake once for all its misses, once per distinct key; a batch of local hits does not ask the
/// lake at all.
pub fn lookup_many_matches_lookup<F: EngineFactory>(factory: F) {
    let wal = Wal::generate(0xBA7C4, 300, 40, 8);
    support::run_fresh(factory, async |engine, lake, bucket| {
        support::write_all_and_reclaim::<F>(&bucket, &lake, &wal, 200).await;

        let keys = wal.keys();
        let single: Vec<_> = {
            let mut out = Vec::new();
            for key in &keys {
                out.push(bucket.lookup(key).await.unwrap());
            }
            out
        };
        let calls = lake.counters().lookup_calls;
        let batched = bucket.lookup_many(&keys).await.unwrap();
        assert_eq!(batched, single, "{}", F::NAME);
        assert_answers::<F>(&wal, &keys, &batched);
        assert_eq!(
            lake.counters().lookup_calls,
            calls + 1,
            "{}: one lake call",
            F::NAME
        );

        // A key asked for more than once reaches the lake once, and every position of it is
        // answered.
        let mut repeated: Vec<Vec<u8>> = keys.clone();
        repeated.extend(keys.iter().cloned());
        repeated.push(keys[0].clone());
        let asked = lake.counters().lookups;
        let answers = bucket.lookup_many(&repeated).await.unwrap();
        let distinct_misses = lake.counters().lookups - asked;
        let misses_once = bucket_misses(&*engine, &keys);
        assert_eq!(
            distinct_misses,
            misses_once,
            "{}: the lake is asked once per distinct key that missed",
            F::NAME
        );
        assert_answers::<F>(&wal, &repeated, &answers);

        // Keys the store holds (values or tombstones at or above W) never reach the lake.
        let local: Vec<Vec<u8>> = keys
            .iter()
            .filter(|k| engine.lookup(k).unwrap().offset().is_some())
            .cloned()
            .collect();
        assert!(!local.is_empty());
        let calls = lake.counters().lookup_calls;
        let answers = bucket.lookup_many(&local).await.unwrap();
        assert_eq!(answers.len(), local.len());
        assert_eq!(lake.counters().lookup_calls, calls, "{}", F::NAME);
        assert!(bucket.lookup_many::<Vec<u8>>(&[]).await.unwrap().is_empty());

        // A failing lake fails the batch, never answering "absent".
        lake.fail_lookups(true);
        assert!(bucket.lookup_many(&keys).await.is_err(), "{}", F::NAME);
        lake.fail_lookups(false);
    });
}

/// How many of `keys` (distinct) the store cannot answer itself: the lake answers those.
fn bucket_misses<E: Engine + ?Sized>(engine: &E, keys: &[Vec<u8>]) -> u64 {
    keys.iter()
        .filter(|k| engine.lookup(k).unwrap().offset().is_none())
        .count() as u64
}

/// Every answer is the model's for its key once the WAL below 300 is applied.
fn assert_answers<F: EngineFactory>(wal: &Wal, keys: &[Vec<u8>], answers: &[Option<Vec<u8>>]) {
    assert_eq!(answers.len(), keys.len(), "{}", F::NAME);
    for (key, got) in keys.iter().zip(answers) {
        assert_eq!(
            got,
            &wal.answer_at(key, 300),
            "{}: key {}",
            F::NAME,
            show(key)
        );
    }
}
