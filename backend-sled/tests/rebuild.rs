//! Rebuilds into a fresh database: what they keep, what they free, and what an interrupted one
//! leaves behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tidemark_backend_sled::SledDiagnostics;
use tidemark_disk::BackendContext;

use tidemark_backend_sled::{
    DB_SUBDIR, GENERATION_FILE, SledContext, SledContextOptions, SledEngine,
};
use tidemark_engine_api::{Engine, EngineOptions, Error, LocalLookup, OpenMode, WriteBatch};

/// A context that rebuilds at every reclaim, however small the database.
fn eager() -> SledContext {
    SledContext::new(SledContextOptions {
        rebuild_min_bytes: 0,
        rebuild_growth: 1.0,
        ..SledContextOptions::default()
    })
    .unwrap()
}

fn options() -> EngineOptions {
    EngineOptions::default().with_sync_writes(false)
}

/// Records `first..first + n`: key `k<offset % keys>`, value the offset's digits.
fn batch(first: u64, n: u64, keys: u64) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for offset in first..first + n {
        batch.put(format!("k{}", offset % keys), offset.to_string(), offset);
    }
    batch
}

/// The newest offset of every key written by `batch` over `0..end`.
fn newest(end: u64, keys: u64) -> HashMap<String, u64> {
    (0..end).map(|o| (format!("k{}", o % keys), o)).collect()
}

/// Every key holds its newest write, or (when that is covered by `w`) nothing: never an older
/// version.
fn assert_no_loss_no_resurrection(engine: &SledEngine, end: u64, keys: u64) {
    let w = engine.watermark();
    for (key, offset) in newest(end, keys) {
        match engine.lookup(key.as_bytes()).unwrap() {
            LocalLookup::Value {
                offset: found,
                bytes,
            } => {
                assert_eq!(found, offset, "{key}: an older version");
                assert_eq!(bytes, offset.to_string().as_bytes(), "{key}");
            }
            LocalLookup::Miss => assert!(offset < w, "{key}@{offset} lost (W {w})"),
            LocalLookup::Tombstone { .. } => panic!("{key}: a tombstone nobody wrote"),
        }
    }
}

/// A thread looking keys up until `stop`: never an error, never a value another key or offset
/// wrote, and never an older version of a key than one it saw before.
fn spawn_reader(
    engine: &Arc<SledEngine>,
    stop: &Arc<AtomicBool>,
    keys: u64,
) -> std::thread::JoinHandle<u64> {
    let (engine, stop) = (Arc::clone(engine), Arc::clone(stop));
    std::thread::spawn(move || {
        let mut seen: HashMap<String, u64> = HashMap::new();
        let mut i = 0u64;
        while !stop.load(Ordering::Acquire) {
            let key = format!("k{}", (i * 7919) % keys);
            if let LocalLookup::Value { offset, bytes } = engine.lookup(key.as_bytes()).unwrap() {
                assert_eq!(bytes, offset.to_string().as_bytes());
                assert_eq!(format!("k{}", offset % keys), key);
                let newest = seen.entry(key.clone()).or_insert(offset);
                assert!(offset >= *newest, "{key}: {offset} after {newest}");
                *newest = offset;
            }
            i += 1;
        }
        i
    })
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(DB_SUBDIR))
        .collect();
    names.sort();
    names
}

#[test]
fn a_rebuild_switches_to_a_fresh_database_holding_every_row_and_frees_the_old_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bucket");
    let context = eager();
    let (end, keys) = (20_000, 5_000);
    {
        let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
        for first in (0..end).step_by(500) {
            engine.apply(&batch(first, 500, keys)).unwrap();
        }
        engine.advance_watermark(end / 2).unwrap();
        let report = engine.reclaim().unwrap();
        // The reclaim queued the rebuild and returned after its sweep.
        assert_eq!(report.bytes_rewritten, None);
        engine.wait_for_background_work().unwrap();
        assert_eq!(engine.storage().inner().unwrap().rebuilds(), 1);
        assert_eq!(engine.generation().unwrap(), 1);
        assert!(context.rebuild_thread_started());
        assert_eq!(names(&dir), ["sled.1", GENERATION_FILE]);
        assert_eq!(
            fs::read_to_string(dir.join(GENERATION_FILE)).unwrap(),
            "1\n"
        );
        // The next reclaim reports what the background rebuild wrote (and, rebuilding at
        // every reclaim, queues the next one). Whether the copy is smaller here depends on
        // sled's footprint; what it saves under a long stream is measured by `tidemark compare`.
        let report = engine.reclaim().unwrap();
        assert!(report.bytes_rewritten.is_some_and(|b| b > 0), "{report:?}");
        engine.wait_for_background_work().unwrap();
        assert_eq!(names(&dir), ["sled.2", GENERATION_FILE]);
        assert_no_loss_no_resurrection(&engine, end, keys);
        assert!(engine.verify().unwrap().is_clean());
        assert_eq!(engine.storage().inner().unwrap().failed_rebuilds(), 0);
        // Writes go on in the new database.
        engine.apply(&batch(end, 500, keys)).unwrap();
    }
    let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
    assert_eq!(engine.generation().unwrap(), 2);
    assert_eq!(engine.applied_end(), end + 500);
    assert_eq!(engine.watermark(), end / 2);
    assert_no_loss_no_resurrection(&engine, end + 500, keys);
    assert!(engine.verify().unwrap().is_clean());
}

#[test]
fn writers_and_readers_during_rebuilds_lose_and_resurrect_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bucket");
    let context = eager();
    let engine = Arc::new(SledEngine::open_in(&context, &dir, options()).unwrap());
    let keys = 3_000;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut first = 0;
            while !stop.load(Ordering::Acquire) {
                engine.apply(&batch(first, 50, keys)).unwrap();
                first += 50;
                // A stream's pace, not synchronisation: sled's process-wide transaction lock
                // is taken back to back by a writer that never pauses, and every other sled
                // call of the process (these lookups as much as the rebuild's copy) starves.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            first
        })
    };
    let reader = spawn_reader(&engine, &stop, keys);
    // Reclaim (and so rebuild) behind the writer, each round once the writer has gone on.
    for _ in 0..6 {
        let from = engine.applied_end();
        while engine.applied_end() < from + 1_000 {
            assert!(!writer.is_finished(), "the writer stopped");
            std::thread::yield_now();
        }
        let w = engine.applied_end().saturating_sub(2_000);
        engine.advance_watermark(w).unwrap();
        engine.reclaim().unwrap();
        // The rebuild runs in the background, beside the writer and the reader.
        engine.wait_for_background_work().unwrap();
    }
    assert_eq!(
        (
            engine.storage().inner().unwrap().rebuilds(),
            engine.storage().inner().unwrap().failed_rebuilds()
        ),
        (6, 0)
    );
    stop.store(true, Ordering::Release);
    let end = writer.join().unwrap();
    reader.join().unwrap();
    assert_eq!(engine.applied_end(), end);
    assert_no_loss_no_resurrection(&engine, end, keys);
    assert!(engine.verify().unwrap().is_clean());
    let generation = engine.generation().unwrap();
    assert_eq!(generation, engine.storage().inner().unwrap().rebuilds());
    drop(engine);

    let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
    assert_eq!(engine.generation().unwrap(), generation);
    assert_eq!(engine.applied_end(), end);
    assert_no_loss_no_resurrection(&engine, end, keys);
    assert_eq!(
        names(&dir),
        [format!("sled.{generation}"), GENERATION_FILE.to_owned()]
    );
}

#[test]
fn what_an_interrupted_rebuild_leaves_is_removed_at_the_next_writable_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bucket");
    let context = eager();
    let (end, keys) = (4_000, 1_000);
    {
        let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
        engine.apply(&batch(0, end, keys)).unwrap();
    }
    // Killed while copying: a half-built next generation and a pointer never renamed.
    fs::create_dir(dir.join("sled.1")).unwrap();
    fs::write(dir.join("sled.1").join("db"), b"half a copy").unwrap();
    fs::write(dir.join("sled.generation.tmp"), "1\n").unwrap();
    {
        let engine =
            SledEngine::open_in(&context, &dir, options().with_open_mode(OpenMode::ReadOnly))
                .unwrap();
        assert_eq!(engine.generation().unwrap(), 0);
        assert_no_loss_no_resurrection(&engine, end, keys);
    }
    assert!(
        dir.join("sled.1").exists(),
        "a read-only open removes nothing"
    );
    {
        let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
        assert_eq!(engine.generation().unwrap(), 0);
        assert_no_loss_no_resurrection(&engine, end, keys);
        assert_eq!(names(&dir), ["sled"]);
        assert!(!dir.join("sled.generation.tmp").exists());
        // The next rebuild takes the number the abandoned one had.
        engine.advance_watermark(end / 2).unwrap();
        engine.reclaim().unwrap();
        engine.wait_for_background_work().unwrap();
        assert_eq!(engine.generation().unwrap(), 1);
    }
    // Killed after the switch, before the old generation was removed.
    fs::create_dir(dir.join("sled")).unwrap();
    fs::write(dir.join("sled").join("db"), b"the old generation").unwrap();
    let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
    assert_eq!(engine.generation().unwrap(), 1);
    assert_no_loss_no_resurrection(&engine, end, keys);
    assert_eq!(names(&dir), ["sled.1", GENERATION_FILE]);
}

#[test]
fn a_damaged_generation_pointer_is_refused_not_guessed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bucket");
    let context = eager();
    {
        let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
        engine.apply(&batch(0, 1_000, 100)).unwrap();
        engine.advance_watermark(500).unwrap();
        engine.reclaim().unwrap();
        engine.wait_for_background_work().unwrap();
        assert_eq!(engine.generation().unwrap(), 1);
    }
    fs::write(dir.join(GENERATION_FILE), "one\n").unwrap();
    let err = SledEngine::open_in(&context, &dir, options()).unwrap_err();
    assert!(matches!(err, Error::Damaged { .. }), "{err}");
    assert!(err.to_string().contains("generation pointer"), "{err}");
    // Nothing was removed: the rows are still there for whoever repairs the pointer.
    assert_eq!(names(&dir), ["sled.1", GENERATION_FILE]);
    fs::write(dir.join(GENERATION_FILE), "1\n").unwrap();
    let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
    assert_eq!(engine.applied_end(), 1_000);
}

#[test]
fn the_default_context_does_not_rebuild_a_small_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bucket");
    let context = SledContext::new(SledContextOptions::default()).unwrap();
    let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
    engine.apply(&batch(0, 2_000, 500)).unwrap();
    engine.advance_watermark(1_000).unwrap();
    engine.reclaim().unwrap();
    engine.wait_for_background_work().unwrap();
    assert!(engine.size_on_disk().unwrap() < tidemark_backend_sled::MIN_REBUILD_BYTES);
    assert_eq!(
        (
            engine.storage().inner().unwrap().rebuilds(),
            engine.generation().unwrap()
        ),
        (0, 0)
    );
    assert_eq!(names(&dir), ["sled"]);
    assert!(
        !context.rebuild_thread_started(),
        "a context that never rebuilds runs no rebuild thread"
    );
}

/// `n` records at offsets `first..first + n`, each a key of its own (`k<offset>`) with a value
/// of about 200 bytes.
fn distinct(first: u64, n: u64) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for offset in first..first + n {
        batch.put(format!("k{offset}"), format!("{offset:0>200}"), offset);
    }
    batch
}

/// What sled takes for a store that holds nothing: a fresh bucket of `context`, flushed.
fn empty_footprint(context: &SledContext, dir: &Path) -> u64 {
    let engine = SledEngine::open_in(context, dir, options()).unwrap();
    engine.flush().unwrap();
    engine.stats().unwrap().bytes_on_disk
}

#[test]
fn an_empty_store_takes_what_the_garbage_trigger_assumes() {
    let tmp = tempfile::tempdir().unwrap();
    let context = SledContext::new(SledContextOptions::default()).unwrap();
    let empty = empty_footprint(&context, &tmp.path().join("empty"));
    // The trigger's estimate of a fresh copy of no rows is at least what sled takes.
    assert!(
        empty <= tidemark_backend_sled::EMPTY_STORE_BYTES,
        "an empty sled store takes {empty} bytes, the trigger assumes {}",
        tidemark_backend_sled::EMPTY_STORE_BYTES
    );
}

#[test]
fn a_bucket_the_lake_covered_shrinks_to_the_empty_footprint_after_one_reclaim() {
    let tmp = tempfile::tempdir().unwrap();
    // The default context: the growth rule alone would keep these stores at their peak.
    let context = SledContext::new(SledContextOptions::default()).unwrap();
    let target = 2 * empty_footprint(&context, &tmp.path().join("empty")) + (1 << 20);
    let n = 30_000;
    let fill = |engine: &SledEngine| {
        for first in (0..n).step_by(1_000) {
            engine.apply(&distinct(first, 1_000)).unwrap();
        }
        engine.flush().unwrap();
        assert!(
            engine.size_on_disk().unwrap() > 2 * target,
            "a store worth shrinking"
        );
    };

    // Never rebuilt since open: covered whole, one reclaim.
    let once = tmp.path().join("once");
    {
        let engine = SledEngine::open_in(&context, &once, options()).unwrap();
        fill(&engine);
        engine.advance_watermark(n).unwrap();
        assert_eq!(engine.reclaim().unwrap().removed(), n);
        engine.wait_for_background_work().unwrap();
        let stats = engine.stats().unwrap();
        assert_eq!(stats.live_entries, 0);
        assert!(
            stats.bytes_on_disk <= target,
            "{} bytes on disk after the drain, target {target}",
            stats.bytes_on_disk
        );
        assert_eq!(stats.counters.space_rebuilds, 1);
        assert!(matches!(engine.lookup(b"k0").unwrap(), LocalLookup::Miss));
    }

    // Rebuilt with its rows first (the growth rule), then drained in steps: the rows left
    // shrink while the files do not grow, which only the garbage rule sees.
    let steps = tmp.path().join("steps");
    let engine = SledEngine::open_in(&context, &steps, options()).unwrap();
    fill(&engine);
    engine.reclaim().unwrap();
    engine.wait_for_background_work().unwrap();
    assert_eq!(engine.storage().inner().unwrap().rebuilds(), 1);
    for w in [n / 3, 2 * n / 3, n] {
        engine.advance_watermark(w).unwrap();
        engine.reclaim().unwrap();
        engine.wait_for_background_work().unwrap();
    }
    let bytes = engine.stats().unwrap().bytes_on_disk;
    assert!(
        bytes <= target,
        "{bytes} bytes after the drain, target {target}"
    );
    assert!(engine.verify().unwrap().is_clean());

    // Drained while a rebuild of its rows is under way: the rows the copy read before the
    // sweep are removed from it, and a copy left mostly garbage by that is rebuilt once more
    // (the reclaim found a rebuild due while this one ran).
    let during = tmp.path().join("during");
    let other = SledEngine::open_in(&context, &during, options()).unwrap();
    fill(&other);
    other.storage().inner().unwrap().hold_rebuilds(true);
    other.reclaim().unwrap();
    assert!(other.storage().inner().unwrap().wait_rebuild_held());
    other.advance_watermark(n).unwrap();
    assert_eq!(other.reclaim().unwrap().removed(), n);
    other.storage().inner().unwrap().hold_rebuilds(false);
    other.wait_for_background_work().unwrap();
    let stats = other.stats().unwrap();
    assert!(
        stats.bytes_on_disk <= target,
        "{} bytes after a drain during a rebuild, target {target}",
        stats.bytes_on_disk
    );
    assert_eq!(other.storage().inner().unwrap().failed_rebuilds(), 0);
    assert!(other.storage().inner().unwrap().rebuilds() >= 1);
    assert_eq!(stats.live_entries, 0);
    drop(other);
    // A further reclaim of the empty store does not rebuild it again.
    let rebuilds = engine.storage().inner().unwrap().rebuilds();
    engine.reclaim().unwrap();
    engine.wait_for_background_work().unwrap();
    assert_eq!(engine.storage().inner().unwrap().rebuilds(), rebuilds);
    let generation = engine.generation().unwrap();
    drop(engine);
    let engine = SledEngine::open_in(&context, &steps, options()).unwrap();
    assert_eq!(engine.generation().unwrap(), generation);
    assert_eq!(engine.stats().unwrap().live_entries, 0);
    assert_eq!(engine.applied_end(), n);
}

#[test]
fn the_garbage_trigger_does_not_fire_on_a_steady_window() {
    let tmp = tempfile::tempdir().unwrap();
    let context = SledContext::new(SledContextOptions {
        rebuild_min_bytes: 0,
        ..SledContextOptions::default()
    })
    .unwrap();
    let engine = SledEngine::open_in(&context, &tmp.path().join("b"), options()).unwrap();
    let (window, step) = (4_000, 1_000);
    let mut end = 0;
    // The size right after the last rebuild, the smallest copy so far (the window's rows do not
    // change, so it is the growth rule's estimate of a fresh copy), and the reclaims since it.
    let (mut rebuilt, mut smallest, mut since) = (0u64, u64::MAX, 0u32);
    let mut quiet = 0;
    for _ in 0..40 {
        engine.apply(&distinct(end, step)).unwrap();
        end += step;
        engine
            .advance_watermark(end.saturating_sub(window))
            .unwrap();
        let before = engine.storage().inner().unwrap().rebuilds();
        let report = engine.reclaim().unwrap();
        engine.wait_for_background_work().unwrap();
        if engine.storage().inner().unwrap().rebuilds() > before {
            // Due only once the files doubled over the smallest copy of the same rows and grew
            // by the minimum step over the last one: never because the rows shrank, which they
            // did not. (0.9: a copy's size is read after its switch, a flush may have added a
            // little.)
            let due_at = if rebuilt == 0 {
                0.0
            } else {
                (2.0 * smallest as f64).max(1.25 * rebuilt as f64)
            };
            assert!(
                report.bytes_after as f64 >= 0.9 * due_at,
                "rebuilt at {} bytes, {since} reclaims after a rebuild to {rebuilt} \
                 (smallest copy {smallest})",
                report.bytes_after
            );
            rebuilt = engine.size_on_disk().unwrap();
            smallest = smallest.min(rebuilt);
            since = 0;
        } else {
            since += 1;
            quiet += 1;
        }
    }
    assert!(
        engine.storage().inner().unwrap().rebuilds() >= 2,
        "the growth rule still rebuilds"
    );
    assert!(
        quiet >= 20,
        "most reclaims of a steady window rebuild nothing: {quiet} of 40"
    );
    for offset in end - window..end {
        match engine.lookup(format!("k{offset}").as_bytes()).unwrap() {
            LocalLookup::Value { offset: found, .. } => assert_eq!(found, offset),
            other => panic!("k{offset} in the window: {other:?}"),
        }
    }
    assert!(engine.verify().unwrap().is_clean());
}

#[test]
fn writers_readers_and_sweeps_during_a_background_rebuild_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bucket");
    let context = eager();
    let engine = Arc::new(SledEngine::open_in(&context, &dir, options()).unwrap());
    let keys = 3_000;
    engine.apply(&batch(0, 9_000, keys)).unwrap();
    engine.advance_watermark(3_000).unwrap();
    // Held after its first chunk, so everything below happens while the copy is under way.
    engine.storage().inner().unwrap().hold_rebuilds(true);
    engine.reclaim().unwrap();
    assert!(
        engine.storage().inner().unwrap().wait_rebuild_held(),
        "the reclaim queued a rebuild"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(&engine, &stop, keys);
    // Overwrites of keys the copy's first chunk read (at offsets from 9,000, where the copy
    // started), and sweeps that remove rows the copy holds: older versions (stale index rows),
    // and newer values written during the copy and swept before any catch-up meets them
    // (k0..k499 at 9,000..9,499, not written again). The copy must end up with none of them.
    let mut end = 9_000;
    let mut swept_newer = 0;
    for _ in 0..3 {
        engine.apply(&batch(end, 1_000, keys)).unwrap();
        end += 1_000;
        let w = end - 2_500;
        engine.advance_watermark(w).unwrap();
        let removed = engine.reclaim().unwrap().values_removed;
        if w > 9_000 {
            swept_newer += removed;
        }
    }
    assert!(
        swept_newer > 0,
        "sweeps removed values written during the copy"
    );
    engine.storage().inner().unwrap().hold_rebuilds(false);
    engine.wait_for_background_work().unwrap();
    stop.store(true, Ordering::Release);
    assert!(reader.join().unwrap() > 0);
    // The copy that ran during the sweeps, then one more: the context rebuilds at every
    // reclaim, and reclaims found one due while the first ran.
    assert_eq!(
        (
            engine.storage().inner().unwrap().rebuilds(),
            engine.storage().inner().unwrap().failed_rebuilds()
        ),
        (2, 0)
    );
    assert_eq!(engine.generation().unwrap(), 2);
    assert_eq!(engine.applied_end(), end);
    assert_no_loss_no_resurrection(&engine, end, keys);
    let live = engine.stats().unwrap().live_entries;
    assert!(engine.verify().unwrap().is_clean());
    drop(engine);

    let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
    assert_eq!(engine.generation().unwrap(), 2);
    assert_eq!(engine.applied_end(), end);
    assert_eq!(engine.stats().unwrap().live_entries, live);
    assert_no_loss_no_resurrection(&engine, end, keys);
    assert!(engine.verify().unwrap().is_clean());
}

#[test]
fn closing_during_a_background_rebuild_abandons_it_and_the_store_reopens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bucket");
    let context = eager();
    let (end, keys) = (6_000, 2_000);
    {
        let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
        engine.apply(&batch(0, end, keys)).unwrap();
        engine.advance_watermark(end / 3).unwrap();
        engine.storage().inner().unwrap().hold_rebuilds(true);
        engine.reclaim().unwrap();
        assert!(engine.storage().inner().unwrap().wait_rebuild_held());
        assert!(dir.join("sled.1").exists(), "the copy is under way");
        // Dropped with the copy half done: it is abandoned, not waited for.
    }
    assert_eq!(names(&dir), ["sled"], "the abandoned copy is removed");
    let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
    assert_eq!(engine.generation().unwrap(), 0);
    assert_eq!(engine.applied_end(), end);
    assert_no_loss_no_resurrection(&engine, end, keys);
    assert!(engine.verify().unwrap().is_clean());
    // The next reclaim rebuilds it, under the number the abandoned one had.
    engine.reclaim().unwrap();
    engine.wait_for_background_work().unwrap();
    assert_eq!(
        (
            engine.storage().inner().unwrap().rebuilds(),
            engine.generation().unwrap()
        ),
        (1, 1)
    );
    drop(engine);

    // A rebuild queued behind another bucket's is dropped from the queue when its bucket
    // closes, and the context (and its thread) can go away with rebuilds still queued.
    let other = tmp.path().join("other");
    let busy = SledEngine::open_in(&context, &other, options()).unwrap();
    busy.apply(&batch(0, end, keys)).unwrap();
    busy.storage().inner().unwrap().hold_rebuilds(true);
    busy.reclaim().unwrap();
    assert!(busy.storage().inner().unwrap().wait_rebuild_held());
    let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
    engine.reclaim().unwrap();
    drop(engine);
    assert_eq!(names(&dir), ["sled.1", GENERATION_FILE]);
    busy.storage().inner().unwrap().hold_rebuilds(false);
    busy.wait_for_background_work().unwrap();
    assert_eq!(busy.storage().inner().unwrap().rebuilds(), 1);
    drop(busy);
    drop(context);
    let engine = SledEngine::open_in(&eager(), &dir, options()).unwrap();
    assert_eq!(engine.generation().unwrap(), 1);
    assert_no_loss_no_resurrection(&engine, end, keys);
}
