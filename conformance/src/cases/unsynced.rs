//! Lost unsynced writes, simulated by a copy of the files taken before the sync: with
//! `sync_writes = false` the files of a live store, copied between two calls, must open as a
//! store that holds whole batches only, a prefix of what was applied and at least what the last
//! durable point (a watermark change) covered, with `W` exactly as it was.
//!
//! A copy reads through the operating system's page cache, so it holds what the engine had
//! handed to the kernel: for sled that excludes writes still in sled's own buffers, for RocksDB
//! and redb it includes unsynced writes the kernel holds. Either is a state a crash can leave;
//! a power loss can leave less (the page cache itself), down to the last durable point, which
//! the copies taken right after a watermark change show.

use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, Record};

use super::util::{apply, batch, fill, key, payload, value};
use crate::hostile::damage::copy_tree;
use crate::{EngineFactory, Harness};

const BATCH: u64 = 10;
const KEYS: u64 = 25;

/// One copy of the live store and what was true when it was taken.
struct Copy {
    dir: std::path::PathBuf,
    /// The applied end at the last durable point before the copy (a watermark change).
    durable_end: u64,
    /// `W` when the copy was taken.
    watermark: u64,
    /// The applied end when the copy was taken.
    applied_end: u64,
}

/// Copies of a live unsynced store taken between calls open to whole-batch prefixes no shorter
/// than the last durable point, with `W` as it was, every key right for the restored end, and a
/// WAL replay from there restoring the rest.
pub fn copies_of_an_unsynced_store_open_to_a_durable_prefix<F: EngineFactory>(factory: F) {
    let options = EngineOptions::default().with_sync_writes(false);
    let h = Harness::with_options(factory, options.clone());
    let e = h.engine();
    let record = |i: u64| Record::put(key(i % KEYS), payload(i, i), i);
    let mut copies = Vec::new();
    let mut durable_end = 0;
    for b in 0..24u64 {
        let first = b * BATCH;
        apply(e, (first..first + BATCH).map(record));
        if b % 6 == 5 {
            // Durable whatever sync_writes says, with every apply before it.
            e.advance_watermark(e.applied_end() - 15).unwrap();
            durable_end = e.applied_end();
        }
        if b % 4 == 1 || b % 6 == 5 {
            let dir = h.scratch().join(format!("copy-{b}"));
            copy_tree(h.path(), &dir);
            copies.push(Copy {
                dir,
                durable_end,
                watermark: e.watermark(),
                applied_end: e.applied_end(),
            });
        }
    }
    let end = e.applied_end();
    let mut lost = 0;
    for copy in &copies {
        let name = copy.dir.display();
        let reopened = h
            .factory()
            .open(&copy.dir, options.clone())
            .unwrap_or_else(|err| panic!("{}: open {name}: {err}", F::NAME));
        let a = reopened.applied_end();
        assert!(
            a % BATCH == 0 && copy.durable_end <= a && a <= copy.applied_end,
            "{}: {name} restored applied end {a}: not a whole-batch prefix between the durable \
             {} and the copied {}",
            F::NAME,
            copy.durable_end,
            copy.applied_end
        );
        assert_eq!(
            reopened.watermark(),
            copy.watermark,
            "{}: {name} W",
            F::NAME
        );
        lost += u64::from(a < copy.applied_end);
        check_keys(&reopened, a, copy.watermark, &name.to_string());
        // The host's WAL replay from the restored applied end brings the copy up to date.
        for first in (a..end).step_by(BATCH as usize) {
            reopened
                .apply(&batch((first..first + BATCH).map(record)))
                .unwrap();
        }
        check_keys(&reopened, end, copy.watermark, &name.to_string());
    }
    crate::skip::notice(&format!(
        "UNSYNCED {}: {} copies of the live store; {lost} reopened without their newest unsynced \
         batches",
        F::NAME,
        copies.len()
    ));
}

/// Every key as the stream below `end` left it (covered ones may be reclaimed: none are here).
fn check_keys<E: Engine>(e: &E, end: u64, w: u64, name: &str) {
    for k in 0..KEYS {
        let newest = (0..end).rev().find(|i| i % KEYS == k);
        let expected = newest.map_or(LocalLookup::Miss, |i| value(i, payload(i, i)));
        assert_eq!(
            e.lookup(&key(k)).unwrap(),
            expected,
            "{name}: key {k} at end {end} (W {w})"
        );
    }
}

/// A clean close keeps every unsynced write: with `sync_writes = false`, batches and a tombstone
/// applied after the last durable point (a flush, then an adopted lake watermark) survive
/// dropping the engine, and the reopened store reads exactly what was applied.
pub fn unsynced_writes_survive_a_clean_close<F: EngineFactory>(factory: F) {
    let mut h = Harness::with_options(factory, EngineOptions::default().with_sync_writes(false));
    let e = h.engine();
    fill(e, 0..40);
    e.flush().unwrap();
    assert_eq!(e.adopt_lake_watermark(20).unwrap().current, 20);
    // After the last durable point (a watermark change makes every earlier apply durable): only
    // the close itself can keep these.
    fill(e, 40..100);
    apply(e, [Record::delete(key(3), 100)]);

    let e = h.reopen();
    assert_eq!((e.watermark(), e.applied_end()), (20, 101));
    assert_eq!(
        e.lookup(&key(3)).unwrap(),
        LocalLookup::Tombstone { offset: 100 }
    );
    for i in (0..100).filter(|&i| i != 3) {
        assert_eq!(
            e.lookup(&key(i)).unwrap(),
            value(i, payload(i, i)),
            "key {i}"
        );
    }
}
