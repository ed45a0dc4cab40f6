//! Rebuilds into a fresh database: what they keep, what they free, and what an interrupted one
//! leaves behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use disk::BackendContext;
use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use backend_sled::{DB_SUBDIR, GENERATION_FILE, SledContext, SledContextOptions, SledEngine};
use engine_api::{Engine, EngineOptions, Error, LocalLookup, OpenMode, WriteBatch};

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
        assert_eq!(engine.rebuilds(), 1);
        assert_eq!(engine.generation().unwrap(), 1);
        // Whether it is smaller here depends on sled's fixed footprint (a few segments even for
        // a small copy); what it saves under a long stream is measured by `tidemark compare`.
        let rewritten = report
            .bytes_rewritten
            .expect("a rebuild reports what it wrote");
        assert_eq!(report.bytes_after, rewritten, "the old database is gone");
        assert_eq!(names(&dir), ["sled.1", GENERATION_FILE]);
        assert_eq!(
            fs::read_to_string(dir.join(GENERATION_FILE)).unwrap(),
            "1\n"
        );
        assert_no_loss_no_resurrection(&engine, end, keys);
        assert!(engine.verify().unwrap().is_clean());
        // Writes go on in the new database.
        engine.apply(&batch(end, 500, keys)).unwrap();
    }
    let engine = SledEngine::open_in(&context, &dir, options()).unwrap();
    assert_eq!(engine.generation().unwrap(), 1);
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
    let reader = {
        let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Acquire) {
                let key = format!("k{}", (i * 7919) % keys);
                // Never an error, and never a value another key or offset wrote.
                if let LocalLookup::Value { offset, bytes } = engine.lookup(key.as_bytes()).unwrap()
                {
                    assert_eq!(bytes, offset.to_string().as_bytes());
                    assert_eq!(format!("k{}", offset % keys), key);
                }
                i += 1;
            }
        })
    };
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
    }
    assert_eq!(engine.rebuilds(), 6);
    stop.store(true, Ordering::Release);
    let end = writer.join().unwrap();
    reader.join().unwrap();
    assert_eq!(engine.applied_end(), end);
    assert_no_loss_no_resurrection(&engine, end, keys);
    assert!(engine.verify().unwrap().is_clean());
    let generation = engine.generation().unwrap();
    assert_eq!(generation, engine.rebuilds());
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
    assert!(engine.size_on_disk().unwrap() < backend_sled::MIN_REBUILD_BYTES);
    assert_eq!((engine.rebuilds(), engine.generation().unwrap()), (0, 0));
    assert_eq!(names(&dir), ["sled"]);
}
