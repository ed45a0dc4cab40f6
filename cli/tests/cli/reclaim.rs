//! `tidemark reclaim`: advances `W` when asked, removes what it covers, reports it readable or
//! as JSON, and the store keeps the result.

use tidemark::{Backend, Engine, EngineOptions, LocalLookup, OpenMode};

use crate::stats::write_store;
use crate::support::{arg, disk_backends, tidemark};

#[test]
fn reclaim_json_reports_what_went_and_the_store_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    for backend in disk_backends() {
        let (dir, _) = write_store(backend, tmp.path());
        let run = tidemark(&["reclaim", arg(&dir), "--watermark", "9", "--json"]).success();
        let v = run.json();
        assert_eq!(v["schema"], "tidemark.reclaim/1");
        assert_eq!(v["backend"], backend.name());
        let update = &v["watermark_update"];
        assert_eq!(
            (update["previous"].as_u64(), update["requested"].as_u64()),
            (Some(6), Some(9)),
            "{v}"
        );
        assert_eq!(
            (update["current"].as_u64(), &update["moved"]),
            (Some(9), &true.into())
        );
        assert_eq!(
            (v["watermark"].as_u64(), v["applied_end"].as_u64()),
            (Some(9), Some(12))
        );
        assert_eq!(v["threshold"], 9);
        // k0..k8 except k3 (its value was replaced by the tombstone at 10): 8 values.
        assert_eq!(v["values_removed"], 8, "{backend}: {v}");
        assert_eq!(
            (&v["tombstones_removed"], &v["corrupt_kept"]),
            (&0.into(), &0.into())
        );
        assert!(
            v["bytes_before"].is_u64() && v["bytes_after"].is_u64(),
            "{v}"
        );
        assert!(v["duration_seconds"].as_f64().unwrap() >= 0.0, "{v}");

        let options = EngineOptions::default().with_open_mode(OpenMode::ReadOnly);
        let engine = backend.open(&dir, options).unwrap();
        assert_eq!(engine.watermark(), 9);
        assert_eq!(engine.lookup(b"k8").unwrap(), LocalLookup::Miss);
        assert_eq!(engine.lookup(b"k9").unwrap().offset(), Some(9));
        assert_eq!(engine.lookup(b"k3").unwrap().offset(), Some(10));
    }
}

#[test]
fn reclaim_without_a_watermark_and_a_clamped_one_read_plainly() {
    let tmp = tempfile::tempdir().unwrap();
    let backend = Backend::Redb;
    let (dir, _) = write_store(backend, tmp.path());

    let run = tidemark(&["reclaim", arg(&dir)]).success();
    assert!(run.stdout.contains("threshold     6 "), "{}", run.stdout);
    assert!(
        run.stdout.contains("removed       5 values, 0 tombstones"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("watermark W"), "{}", run.stdout);
    assert!(run.stdout.contains(" -> "), "{}", run.stdout);

    let run = tidemark(&["reclaim", arg(&dir), "--watermark", "1000"]).success();
    assert!(
        run.stdout
            .contains("6 -> 12 (asked 1000: clamped to the applied end)"),
        "{}",
        run.stdout
    );
    let run = tidemark(&["reclaim", arg(&dir), "--watermark", "3", "--json"]);
    let v = run.json();
    assert_eq!(v["watermark_update"]["moved"], false, "{v}");
    assert_eq!(
        (v["watermark"].as_u64(), v["values_removed"].as_u64()),
        (Some(12), Some(0))
    );
}
