//! `tidemark compare` as a user runs it: a short comparison prints its tables, leaves the two
//! charts and the JSON report, and exits 0; so does the historical-partitions scenario
//! (`--buckets`) on every disk backend; arguments it cannot run are refused with exit 2 before
//! anything is written.

use crate::support::{arg, disk_backends, tidemark};

#[test]
fn a_short_comparison_prints_its_figures_and_leaves_its_files() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("charts");
    let backend = disk_backends()[0].name();
    let run = tidemark(&[
        "compare",
        "--duration",
        "300ms",
        "--rate",
        "1000",
        "--lag",
        "100",
        "--backends",
        backend,
        "--variants",
        "tidemark,no-cleanup",
        "--out",
        arg(&out),
    ])
    .success();
    for needle in ["writes and lookups", "space and reclamation", "targets"] {
        assert!(run.stdout.contains(needle), "{needle}: {run:?}");
    }
    assert!(
        run.stdout.contains("every lookup matched the model"),
        "{run:?}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    assert_eq!(json["schema"], "tidemark.compare/1");
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r["backend"] == backend));
    for svg in ["bytes-on-disk.svg", "write-p99.svg"] {
        let text = std::fs::read_to_string(out.join(svg)).unwrap();
        assert!(text.starts_with("<svg"), "{svg}");
    }
}

#[test]
fn arguments_it_cannot_run_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("never");
    for (args, named) in [
        (vec!["--lag", "0"], "--lag"),
        (vec!["--value-size", "2"], "--value-size"),
        (vec!["--duration", "0s"], "--duration"),
    ] {
        let mut all = vec!["compare", "--out", arg(&out)];
        all.extend(args.iter().copied());
        let run = tidemark(&all);
        assert_eq!(run.code, Some(2), "{all:?}: {run:?}");
        assert!(
            run.stderr.starts_with("tidemark: ") && run.stderr.contains(named),
            "{all:?}: {run:?}"
        );
        assert!(!out.exists(), "{all:?} created {}", out.display());
    }
}

#[test]
fn the_historical_partitions_scenario_runs_every_backend_and_answers_right() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("buckets");
    let run = tidemark(&[
        "compare",
        "--buckets",
        "6",
        "--active",
        "2",
        "--duration",
        "2s",
        "--out",
        arg(&out),
    ])
    .success();
    for needle in ["historical partitions", "space and process", "reclaims"] {
        assert!(run.stdout.contains(needle), "{needle}: {run:?}");
    }
    assert!(
        run.stdout.contains("every lookup matched the model"),
        "{run:?}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    assert_eq!(json["schema"], "tidemark.compare.buckets/1");
    assert_eq!(json["scenario"]["buckets"], 6);
    assert_eq!(json["scenario"]["active"], 2);
    let runs = json["runs"].as_array().unwrap();
    let backends: Vec<&str> = runs
        .iter()
        .map(|r| r["backend"].as_str().unwrap())
        .collect();
    let expected: Vec<&str> = disk_backends().iter().map(|b| b.name()).collect();
    assert_eq!(backends, expected, "one run per disk backend");
    for run in runs {
        assert_eq!(run["buckets"], 6, "{run}");
        assert_eq!(run["lookups"]["mismatches"], 0, "{run}");
        assert_eq!(run["lookups"]["errors"], 0, "{run}");
        assert!(run["lookups"]["checked"].as_u64().unwrap() > 0, "{run}");
        assert!(run["bytes"]["window_end"].as_u64().unwrap() > 0, "{run}");
        assert!(run["bytes"]["end"].as_u64().unwrap() > 0, "{run}");
        assert!(
            run["bytes"]["end_over_window"].as_f64().unwrap() > 0.0,
            "{run}"
        );
        for figure in ["open_fds", "threads", "rss_bytes"] {
            for at in ["max", "end"] {
                let value = run["process"][at][figure].as_u64().unwrap();
                assert!(value > 0, "{at} {figure}: {run}");
            }
        }
        assert!(run["write_latency"]["p99"].as_f64().unwrap() > 0.0, "{run}");
        assert!(
            run["lookup_latency"]["p99"].as_f64().unwrap() > 0.0,
            "{run}"
        );
        assert!(run["reclaim"]["runs"].as_u64().unwrap() > 0, "{run}");
    }
    for svg in ["buckets-bytes.svg", "buckets-process.svg"] {
        let text = std::fs::read_to_string(out.join(svg)).unwrap();
        assert!(text.starts_with("<svg"), "{svg}");
    }
}

#[test]
fn the_historical_partitions_scenario_refuses_what_it_cannot_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("never");
    for (args, named) in [
        (vec!["--buckets", "1"], "--buckets"),
        (vec!["--buckets", "4", "--active", "5"], "--active"),
        (
            vec!["--buckets", "4", "--variants", "no-cleanup"],
            "tidemark variant",
        ),
        (vec!["--active", "2"], "--buckets"),
    ] {
        let mut all = vec!["compare", "--out", arg(&out)];
        all.extend(args.iter().copied());
        let run = tidemark(&all);
        assert_eq!(run.code, Some(2), "{all:?}: {run:?}");
        assert!(run.stderr.contains(named), "{all:?}: {run:?}");
        assert!(!out.exists(), "{all:?} created {}", out.display());
    }
}
