//! A store whose engine panics on its damaged files: the tool answers with the error and one
//! warning, never with the panic hook's report of the panic.

use crate::stats::write_store;
use crate::support::{arg, tidemark};

/// redb reads its `&str` metadata keys back with an unwrap of their UTF-8, so a metadata row
/// name whose first byte is damaged makes it panic when the store opens (a read-only open, as
/// `stats` does, does not verify page checksums first).
#[test]
fn an_engine_panic_is_one_error_and_one_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = write_store(tidemark::Backend::Redb, tmp.path());
    let file = dir.join(tidemark::redb::DB_FILE);
    let mut bytes = std::fs::read(&file).unwrap();
    let name = b"covered/";
    let at = bytes
        .windows(name.len())
        .position(|w| w == name)
        .expect("the store holds a covered-run row");
    bytes[at] = 0xff;
    std::fs::write(&file, bytes).unwrap();

    let run = tidemark(&["stats", arg(&dir)]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        !run.stderr.contains("panicked at"),
        "the panic hook reported the contained panic: {run:?}"
    );
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{run:?}");
    assert!(
        lines[0]
            .starts_with("tidemark: redb backend error: the storage engine panicked during open"),
        "{run:?}"
    );
    assert!(
        lines[1].contains("WARN") && lines[1].contains("the storage engine panicked"),
        "{run:?}"
    );
}
