//! Helpers shared by the sled backend's test files.
#![allow(dead_code)]

use std::path::Path;

use tidemark_backend_sled::{SledEngine, SledStorage};
use tidemark_disk::DiskEngine;
use tidemark_disk::testing::Chaos;
use tidemark_engine_api::{EngineOptions, OpenEngine, WriteBatch};

/// A sled engine whose storage sits in the fault layer, for tests that pause a reclaim between
/// two chunks ([`tidemark_disk::testing::Faults::on_chunk_committed`]).
#[allow(dead_code, reason = "not every test binary pauses reclaims")]
pub type ChaosEngine = DiskEngine<Chaos<SledStorage>>;

/// Opens with fast (unsynced) writes; durability is tested separately through reopen.
pub fn open_fast(dir: &Path) -> SledEngine {
    SledEngine::open(dir, EngineOptions::default().with_sync_writes(false)).unwrap()
}

/// A batch of puts `key{i}` at offsets `first..first + count`.
pub fn puts(first: u64, count: u64) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for i in 0..count {
        let offset = first + i;
        batch.put(key(offset), format!("v{offset}"), offset);
    }
    batch
}

/// The key written at `offset` by [`puts`].
pub fn key(offset: u64) -> Vec<u8> {
    format!("key{offset:08}").into_bytes()
}

/// Opens the bucket's sled database directly, bypassing the engine, to damage or inspect it.
/// The engine must be dropped; its background threads may hold sled's lock a moment longer.
pub fn raw_db(dir: &Path) -> sled::Db {
    let mut attempts = 0;
    loop {
        match sled::open(dir.join(tidemark_backend_sled::DB_SUBDIR)) {
            Ok(db) => return db,
            Err(e) if attempts < 1000 => {
                attempts += 1;
                eprintln!("retrying sled open: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    }
}
