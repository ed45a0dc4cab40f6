//! `tidemark stats`: what the store holds, readable or as JSON that parses back; the backend is
//! read from the marker; it writes nothing (not a byte, where the engine opens read-only).

use std::path::{Path, PathBuf};

use tidemark::{Backend, Engine, EngineOptions, WriteBatch};
use tidemark_conformance::cases::util::file_snapshot;

use crate::support::{arg, disk_backends, release_sled_lock, run_with, tidemark};

/// Writes a store of `backend` with 10 values, 2 tombstones (one over a value) and `W = 6` into
/// the directory named after the backend under `parent`; returns that directory and the store's
/// live entries as the engine counts them.
pub fn write_store(backend: Backend, parent: &Path) -> (PathBuf, u64) {
    let dir = parent.join(backend.name());
    let engine = backend.open(&dir, EngineOptions::default()).unwrap();
    let mut batch = WriteBatch::new();
    for i in 0..10u64 {
        batch.put(format!("k{i}"), format!("v{i}"), i);
    }
    batch.delete("k3", 10).delete("gone", 11);
    engine.apply(&batch).unwrap();
    engine.advance_watermark(6).unwrap();
    let live = engine.stats().unwrap().live_entries;
    drop(engine);
    release_sled_lock(&dir);
    (dir, live)
}

#[test]
fn stats_json_parses_back_to_what_the_store_holds() {
    let tmp = tempfile::tempdir().unwrap();
    for backend in disk_backends() {
        let (dir, live) = write_store(backend, tmp.path());
        for given in [None, Some(backend.name())] {
            let mut args = vec!["stats", "--json", arg(&dir)];
            args.extend(given.iter().flat_map(|b| ["--backend", b]));
            let run = tidemark(&args).success();
            assert!(run.stderr.is_empty(), "{run:?}");
            let v = run.json();
            assert_eq!(v["schema"], "tidemark.stats/1");
            assert_eq!(v["path"], arg(&dir));
            assert_eq!(v["backend"], backend.name());
            assert_eq!(
                v["format_version"],
                tidemark_engine_api::codec::FORMAT_VERSION
            );
            assert_eq!(
                (v["watermark"].as_u64(), v["applied_end"].as_u64()),
                (Some(6), Some(12))
            );
            assert_eq!(v["watermark_above_applied_end"], false);
            assert!(v["bytes_on_disk"].as_u64().unwrap() > 0, "{v}");
            // The LSM backends estimate their live entries.
            let exact = !matches!(backend, Backend::RocksDb | Backend::Fjall);
            assert_eq!(v["live_entries_exact"], exact, "{v}");
            if exact {
                assert_eq!(v["live_entries"].as_u64(), Some(live), "{v}");
                assert_eq!(live, 11);
                // Index rows below W: k0..k5 (k3's is stale, still counted: an upper bound).
                assert_eq!(v["covered_estimate"].as_u64(), Some(6), "{v}");
            } else {
                // An LSM's is an estimate spread over the offsets after a reopen.
                assert!(v["covered_estimate"].is_u64(), "{v}");
            }
            let counters = v["counters"].as_object().unwrap();
            assert_eq!(counters.len(), 7, "{v}");
            assert!(counters.values().all(|c| c == 0), "{v}");
        }
    }
}

#[test]
fn stats_reads_like_a_report_not_a_debug_dump() {
    let tmp = tempfile::tempdir().unwrap();
    for backend in disk_backends() {
        let (dir, _) = write_store(backend, tmp.path());
        let run = tidemark(&["stats", arg(&dir)]).success();
        let out = &run.stdout;
        for line in [
            format!(
                "backend       {backend} (format {})",
                tidemark_engine_api::codec::FORMAT_VERSION
            ),
            "watermark W   6".to_string(),
            "applied end   12".to_string(),
        ] {
            assert!(out.contains(&line), "{backend}: no {line:?} in\n{out}");
        }
        assert!(
            out.contains(" B (") || out.contains(" KiB (") || out.contains(" MiB ("),
            "{out}"
        );
        assert!(!out.contains('{') && !out.contains("EngineStats"), "{out}");
    }
}

#[test]
fn inspection_changes_no_file_where_the_engine_opens_read_only() {
    let tmp = tempfile::tempdir().unwrap();
    for backend in [Backend::Redb, Backend::RocksDb] {
        if !backend.is_compiled() {
            continue;
        }
        let (dir, _) = write_store(backend, tmp.path());
        let before = file_snapshot(&dir);
        for args in [vec!["stats"], vec!["stats", "--json"], vec!["verify"]] {
            let mut all = args.clone();
            all.push(arg(&dir));
            assert_eq!(tidemark(&all).code, Some(0), "{all:?}");
            assert_eq!(
                file_snapshot(&dir),
                before,
                "{backend}: {all:?} changed a file"
            );
        }
    }
}

#[test]
fn another_backend_than_the_marker_names_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let backends = disk_backends();
    for (i, backend) in backends.iter().enumerate() {
        let (dir, _) = write_store(*backend, tmp.path());
        let other = backends[(i + 1) % backends.len()];
        let before = file_snapshot(&dir);
        for command in ["stats", "verify", "reclaim"] {
            let run = tidemark(&[command, arg(&dir), "--backend", other.name()]);
            assert_eq!(run.code, Some(2), "{run:?}");
            let expected = format!("holds a {backend} store, not a {other} store");
            assert!(run.stderr.contains(&expected), "{run:?}");
        }
        assert_eq!(file_snapshot(&dir), before);
    }
}

#[test]
fn logs_follow_rust_log_on_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let backend = disk_backends()[0];
    let (dir, _) = write_store(backend, tmp.path());
    let quiet = run_with(&["stats", "--json", arg(&dir)], None);
    assert!(quiet.stderr.is_empty(), "{quiet:?}");
    let verbose = run_with(&["stats", "--json", arg(&dir)], Some("tidemark=debug"));
    assert!(verbose.stderr.contains("store opened"), "{verbose:?}");
    // Logs never mix into the JSON on stdout.
    assert_eq!(verbose.json(), quiet.json());
}
