//! Writers, a watermark-advancing reclaimer and readers all at once.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tidemark_engine_api::{Engine, EngineOptions, LocalLookup, Record, WriteBatch};

use super::util::{SplitMix64, assert_lookup, key, payload, tombstone, value};
use crate::{EngineFactory, Harness};

const KEYS: u64 = 40;
const RECORDS: u64 = 3_000;
const DISTANCE: u64 = 3;
/// The writer pauses at every multiple of this many records until the reclaimer and both
/// readers have made progress, so the threads really interleave even on a very fast backend.
const CHECKPOINT: u64 = 150;
const READERS: usize = 2;

/// Progress the writer waits on; `abort` is raised by any thread that panics so nobody waits
/// forever on a dead thread.
#[derive(Default)]
struct Progress {
    done: AtomicBool,
    abort: AtomicBool,
    reclaims: AtomicU64,
    lookups: [AtomicU64; READERS],
}

/// Raises `abort` when the thread holding it unwinds.
struct AbortOnPanic<'a>(&'a Progress);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort.store(true, Ordering::SeqCst);
        }
    }
}

impl Progress {
    fn finished(&self) -> bool {
        self.done.load(Ordering::SeqCst) || self.abort.load(Ordering::SeqCst)
    }

    /// Yields until the reclaimer and every reader have moved past the given counts.
    fn wait_for_others(&self, reclaims: u64, lookups: &[u64; READERS]) {
        while !self.abort.load(Ordering::SeqCst)
            && (self.reclaims.load(Ordering::SeqCst) <= reclaims
                || self
                    .lookups
                    .iter()
                    .zip(lookups)
                    .any(|(now, then)| now.load(Ordering::SeqCst) <= *then))
        {
            std::thread::yield_now();
        }
    }

    fn snapshot(&self) -> (u64, [u64; READERS]) {
        (
            self.reclaims.load(Ordering::SeqCst),
            std::array::from_fn(|i| self.lookups[i].load(Ordering::SeqCst)),
        )
    }
}

/// The latest applied write of each key: `(offset, is_tombstone)`.
type Latest = Mutex<Vec<Option<(u64, bool)>>>;

/// One writer thread applies a continuous stream of batches (a few thousand records over a small
/// key space) while another thread keeps advancing the watermark to trail the applied end and
/// runs `reclaim` in a loop, and two readers look keys up. Checked during the run: a key's latest
/// applied write that is still uncovered after the lookup (`offset >= W - D`, `W` read after it)
/// is found with that value or a newer one (no uncovered entry is ever lost); a reader never
/// sees an older offset for a key than it saw before; values always match their offsets; `W`
/// never decreases and never passes the applied end. Checked after: every uncovered latest write
/// is there, every covered one is gone, and the counters add up.
pub fn concurrent_apply_reclaim_lookup<F: EngineFactory>(factory: F) {
    let h = Harness::with_options(
        factory,
        EngineOptions::default()
            .with_retention_distance(DISTANCE)
            .with_sync_writes(false)
            .with_sweep_chunk_rows(64),
    );
    let e = h.engine();
    let latest: Latest = Mutex::new(vec![None; KEYS as usize]);
    let progress = Progress::default();

    std::thread::scope(|s| {
        s.spawn(|| {
            let _abort = AbortOnPanic(&progress);
            writer(e, &latest, &progress);
            progress.done.store(true, Ordering::SeqCst);
        });
        s.spawn(|| {
            let _abort = AbortOnPanic(&progress);
            reclaimer(e, &progress);
        });
        for id in 0..READERS {
            let (latest, progress) = (&latest, &progress);
            s.spawn(move || {
                let _abort = AbortOnPanic(progress);
                reader(e, latest, progress, id);
            });
        }
    });
    assert!(!progress.abort.load(Ordering::SeqCst));

    // After the run: cover everything but the retention margin and reclaim once more.
    let end = e.applied_end();
    assert_eq!(end, RECORDS);
    e.advance_watermark(end).unwrap();
    let threshold = end - DISTANCE;
    assert_eq!(e.reclaim().unwrap().threshold, threshold);
    let latest = latest.into_inner().unwrap();
    let mut live = 0;
    for (k, write) in latest.iter().enumerate() {
        let k = k as u64;
        let expected = match *write {
            Some((offset, tomb)) if offset >= threshold => {
                live += 1;
                if tomb {
                    tombstone(offset)
                } else {
                    value(offset, payload(k, offset))
                }
            }
            _ => LocalLookup::Miss,
        };
        assert_lookup(e, &key(k), &expected);
    }
    let s = e.stats().unwrap();
    assert_eq!(
        (
            s.counters.applied,
            s.counters.covered,
            s.counters.already_applied
        ),
        (RECORDS, 0, 0)
    );
    assert!(s.counters.reclaim_runs >= 1);
    assert!(s.counters.reclaimed_values + s.counters.reclaimed_tombstones <= RECORDS);
    if h.capabilities().declared.exact_live_entries {
        assert_eq!(s.live_entries, live);
    }
}

fn writer<E: Engine>(e: &E, latest: &Latest, progress: &Progress) {
    let mut rng = SplitMix64::new(0xC0FFEE);
    let mut offset = 0u64;
    let mut seen = progress.snapshot();
    while offset < RECORDS && !progress.abort.load(Ordering::SeqCst) {
        if offset / CHECKPOINT != 0 && offset % CHECKPOINT < 8 {
            progress.wait_for_others(seen.0, &seen.1);
            seen = progress.snapshot();
        }
        let n = (1 + rng.below(8)).min(RECORDS - offset);
        let mut b = WriteBatch::new();
        let mut writes = Vec::new();
        for i in 0..n {
            let k = rng.below(KEYS);
            let o = offset + i;
            let tomb = rng.below(5) == 0;
            b.push(if tomb {
                Record::delete(key(k), o)
            } else {
                Record::put(key(k), payload(k, o), o)
            });
            writes.push((k, o, tomb));
        }
        let out = e.apply(&b).unwrap();
        assert_eq!(
            (
                out.applied,
                out.covered,
                out.already_applied,
                out.applied_end
            ),
            (n, 0, 0, offset + n),
            "fresh offsets must all be applied"
        );
        let mut latest = latest.lock().unwrap();
        for (k, o, tomb) in writes {
            latest[k as usize] = Some((o, tomb));
        }
        offset += n;
    }
}

fn reclaimer<E: Engine>(e: &E, progress: &Progress) {
    let mut rng = SplitMix64::new(7);
    let mut last = 0u64;
    while !progress.finished() {
        let end = e.applied_end();
        let up = e
            .advance_watermark(end.saturating_sub(rng.below(60)))
            .unwrap();
        assert!(
            up.current >= up.previous && up.current >= last,
            "watermark went back: {up:?}"
        );
        assert!(
            up.current <= e.applied_end(),
            "watermark passed the applied end: {up:?}"
        );
        last = up.current;
        let r = e.reclaim().unwrap();
        assert!(
            r.threshold <= e.watermark().saturating_sub(DISTANCE),
            "{r:?}"
        );
        assert_eq!(r.corrupt_kept, 0);
        progress.reclaims.fetch_add(1, Ordering::SeqCst);
        std::thread::yield_now();
    }
}

fn reader<E: Engine>(e: &E, latest: &Latest, progress: &Progress, id: usize) {
    let mut rng = SplitMix64::new(id as u64);
    let mut seen: Vec<Option<u64>> = vec![None; KEYS as usize];
    let mut last_w = 0u64;
    let mut after_done = 0;
    while after_done < KEYS * 2 {
        if progress.finished() {
            after_done += 1;
        }
        progress.lookups[id].fetch_add(1, Ordering::SeqCst);
        let k = rng.below(KEYS);
        let known = latest.lock().unwrap()[k as usize];
        let got = e.lookup(&key(k)).unwrap();
        let w = e.watermark();
        assert!(w >= last_w, "watermark went back from {last_w} to {w}");
        assert!(w <= e.applied_end(), "watermark {w} passed the applied end");
        last_w = w;
        let threshold = w.saturating_sub(DISTANCE);
        if let LocalLookup::Value { offset, bytes } = &got {
            assert_eq!(
                bytes,
                &payload(k, *offset),
                "key {k}: value does not match its offset"
            );
        }
        if let Some(offset) = got.offset() {
            if let Some(before) = seen[k as usize] {
                assert!(
                    offset >= before,
                    "key {k}: saw offset {before}, then the older offset {offset}"
                );
            }
            seen[k as usize] = Some(offset);
        }
        if let Some((offset, tomb)) = known
            && offset >= threshold
        {
            match got.offset() {
                None => panic!(
                    "key {k}: uncovered write at offset {offset} lost (threshold {threshold})"
                ),
                Some(o) if o < offset => {
                    panic!("key {k}: found offset {o}, older than the applied write at {offset}")
                }
                Some(o) if o == offset => assert_eq!(
                    matches!(got, LocalLookup::Tombstone { .. }),
                    tomb,
                    "key {k}@{offset}: wrong kind"
                ),
                Some(_) => {}
            }
        }
    }
}
