//! Steady state: continuous overwrites of a fixed key space, with the watermark trailing the
//! writer and a reclaim after every round, keep sled's files at a plateau.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use common::open_fast;
use engine_api::{Engine, WriteBatch};

const KEYS: u64 = 2_000;
const ROUNDS: u64 = 60;
const WARM_UP: u64 = 15;

#[test]
fn size_on_disk_plateaus_under_continuous_overwrites() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = open_fast(tmp.path());
    let mut offset = 0u64;
    let mut sizes = Vec::new();
    for _round in 0..ROUNDS {
        let mut batch = WriteBatch::new();
        for k in 0..KEYS {
            batch.put(format!("key{k:05}"), vec![0xa5u8; 200], offset);
            offset += 1;
        }
        engine.apply(&batch).unwrap();
        // The lake trails the writer by half a round.
        engine.advance_watermark(offset - KEYS / 2).unwrap();
        engine.reclaim().unwrap();
        engine.flush().unwrap();
        sizes.push(engine.size_on_disk().unwrap());
    }
    let written = offset * 200;
    let warm_peak = sizes.iter().take(WARM_UP as usize).copied().max().unwrap();
    let late_peak = sizes.iter().skip(WARM_UP as usize).copied().max().unwrap();
    println!("payload written: {written} bytes over {ROUNDS} rounds");
    println!("size_on_disk per round: {sizes:?}");
    println!("peak during warm-up {warm_peak}, peak after {late_peak}");
    assert_eq!(engine.stats().unwrap().live_entries, KEYS / 2);
    // After warm-up the files stop growing with the data written: sled's segment cleaner reuses
    // the space the sweeper frees. (2x leaves room for cleaning running late.)
    assert!(
        late_peak <= 2 * warm_peak,
        "sled kept growing: warm-up peak {warm_peak}, later peak {late_peak}"
    );
    assert!(
        written > 3 * late_peak,
        "test wrote too little to show a plateau"
    );
}
