//! A path that holds no store: every command refuses with a clear error on stderr, exit 2, and
//! leaves the path exactly as it was.

use tidemark_conformance::cases::util::file_snapshot;
use tidemark_disk::layout;

use crate::support::{arg, disk_backends, tidemark};

/// Every command that needs a store, with and without `--backend`.
fn commands(backend: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for given in [None, Some(backend)] {
        for command in [
            vec!["stats"],
            vec!["stats", "--json"],
            vec!["verify"],
            vec!["verify", "--json"],
            vec!["reclaim"],
            vec!["reclaim", "--watermark", "5", "--json"],
        ] {
            let mut args: Vec<String> = command.into_iter().map(String::from).collect();
            if let Some(b) = given {
                args.extend(["--backend".to_string(), b.to_string()]);
            }
            out.push(args);
        }
    }
    out
}

#[track_caller]
fn assert_refused(args: &[String], path: &std::path::Path, needle: &str) {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.push(arg(path));
    let run = tidemark(&all);
    assert_eq!(run.code, Some(2), "{all:?}: {run:?}");
    assert!(run.stdout.is_empty(), "{all:?}: {run:?}");
    assert!(
        run.stderr.starts_with("tidemark: ") && run.stderr.contains(needle),
        "{all:?}: {run:?}"
    );
}

#[test]
fn a_missing_path_is_refused_and_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-bucket");
    for backend in disk_backends() {
        for args in commands(backend.name()) {
            assert_refused(&args, &missing, "no Tidemark store");
            assert!(!missing.exists(), "{args:?} created {}", missing.display());
        }
    }
    assert!(file_snapshot(tmp.path()).is_empty());
}

#[test]
fn an_empty_directory_is_refused_and_left_empty() {
    let tmp = tempfile::tempdir().unwrap();
    for backend in disk_backends() {
        for args in commands(backend.name()) {
            assert_refused(&args, tmp.path(), "the directory is empty");
            assert!(file_snapshot(tmp.path()).is_empty(), "{args:?} wrote");
        }
    }
}

#[test]
fn a_marker_without_the_engine_files_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    for backend in disk_backends() {
        let dir = tmp.path().join(backend.name());
        layout::claim_directory(&dir, backend.name()).unwrap();
        let before = file_snapshot(&dir);
        for args in commands(backend.name()) {
            assert_refused(&args, &dir, "has a TIDEMARK marker but no");
            assert_eq!(
                file_snapshot(&dir),
                before,
                "{args:?} changed {}",
                dir.display()
            );
        }
    }
}

#[test]
fn foreign_files_are_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("precious.dat"), "not a store").unwrap();
    let before = file_snapshot(tmp.path());
    for args in commands("redb") {
        assert_refused(&args, tmp.path(), "precious.dat");
        assert_eq!(file_snapshot(tmp.path()), before, "{args:?}");
    }
}
