//! `tidemark compare` as a user runs it: a short comparison prints its tables, leaves the two
//! charts and the JSON report, and exits 0; arguments it cannot run are refused with exit 2
//! before anything is written.

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
