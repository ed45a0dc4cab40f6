//! A shared database whose fjall worker failed (a flush that could not write its table, as on
//! a full disk): the flushes and closes of its buckets fail at once instead of waiting out the
//! flush deadline one bucket after another.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use tidemark_backend_fjall::{BackendContext, FjallContext, FjallDiagnostics, FjallEngine};
use tidemark_engine_api::{Engine, EngineOptions};

#[test]
fn buckets_of_a_database_whose_worker_failed_fail_their_flushes_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = FjallContext::for_buckets(4).unwrap();
    let open = |name: &str| {
        FjallEngine::open_in(&ctx, &tmp.path().join(name), EngineOptions::default()).unwrap()
    };
    let (a, b) = (open("a"), open("b"));
    a.put(b"k", b"a", 0).unwrap();
    b.put(b"k", b"b", 0).unwrap();
    // Every keyspace's table directory goes: the next flush cannot create its table file, its
    // worker stops with the error and fjall poisons the database.
    let keyspaces = a.storage().database_path().unwrap().join("keyspaces");
    for keyspace in std::fs::read_dir(&keyspaces).unwrap() {
        let tables = keyspace.unwrap().path().join("tables");
        if tables.is_dir() {
            std::fs::remove_dir_all(&tables).unwrap();
        }
    }
    for engine in [&a, &b] {
        let err = engine.flush_memtables().unwrap_err().to_string();
        assert!(
            err.contains("the shared fjall database failed"),
            "a flush waited for workers that no longer flush: {err}"
        );
    }
}
