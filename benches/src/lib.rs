//! Shared workload and raw-engine baselines for the Tidemark benchmarks.
//!
//! The raw baselines write the same keys and payloads with each engine's native API — no offset
//! tag, no index, no metadata — so a benchmark can quote the cost of Tidemark's bookkeeping as a
//! ratio measured in one run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use engine_api::WriteBatch;
use tidemark::BackendConfig;

/// Keys in the benchmark key space.
pub const KEYS: u64 = 10_000;
/// Payload bytes per value.
pub const VALUE_SIZE: usize = 128;
/// Records per batch.
pub const BATCH: u64 = 100;

/// The key for index `i` (fixed width so all engines see the same byte strings).
pub fn key(i: u64) -> Vec<u8> {
    format!("key-{:08}", i % KEYS).into_bytes()
}

/// A deterministic payload for offset `offset`.
pub fn payload(offset: u64) -> Vec<u8> {
    let seed = offset.to_le_bytes();
    (0..VALUE_SIZE).map(|i| seed[i % 8] ^ i as u8).collect()
}

/// The `n`-th batch of the stream: `BATCH` puts at consecutive offsets, spread over the key space.
pub fn batch(n: u64) -> WriteBatch {
    let mut b = WriteBatch::new();
    for i in 0..BATCH {
        let offset = n * BATCH + i;
        b.put(key(offset.wrapping_mul(7919)), payload(offset), offset);
    }
    b
}

/// A raw engine without Tidemark's tagging, for baselines.
pub trait RawStore {
    /// Writes the batch's keys and payloads natively (untagged, unindexed, unsynced).
    fn write(&self, batch: &WriteBatch);
    /// Reads a key natively.
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;
}

/// Writes `(key, payload)` of every put in `batch` through `put`.
fn for_each_put(batch: &WriteBatch, mut put: impl FnMut(&[u8], &[u8])) {
    for r in batch.records() {
        if let engine_api::Record::Put { key, value, .. } = r {
            put(key, value);
        }
    }
}

/// Buckets the benchmarks open at once: their contexts are sized for this many, and each raw
/// baseline gets the same cache share as one bucket.
pub const BENCH_BUCKETS: usize = 4;

/// The backend configuration every benchmark opens its buckets with (and whose tuning the raw
/// baselines copy): each disk backend's context sized for [`BENCH_BUCKETS`].
pub fn config() -> BackendConfig {
    BackendConfig::for_buckets(BENCH_BUCKETS).unwrap()
}

/// Raw RocksDB, tuned exactly like the buckets (the options of the shared context).
pub struct RawRocks(rocksdb::DB);

impl RawRocks {
    /// Opens a raw RocksDB at `path` with the options of `config`'s RocksDB context.
    pub fn open(config: &BackendConfig, path: &Path) -> Self {
        let mut opts = config.rocksdb.as_ref().unwrap().db_options();
        opts.create_if_missing(true);
        RawRocks(rocksdb::DB::open(&opts, path).unwrap())
    }
}

impl RawStore for RawRocks {
    fn write(&self, batch: &WriteBatch) {
        let mut wb = rocksdb::WriteBatch::default();
        for_each_put(batch, |k, v| wb.put(k, v));
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(false);
        self.0.write_opt(wb, &wo).unwrap();
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.get(key).unwrap()
    }
}

/// Raw sled with a bucket's cache share.
pub struct RawSled(sled::Db);

impl RawSled {
    /// Opens a raw sled database at `path` with the cache share of `config`'s sled context.
    pub fn open(config: &BackendConfig, path: &Path) -> Self {
        let cache = config.sled.as_ref().unwrap().cache_bytes_per_bucket();
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache)
            .open()
            .unwrap();
        RawSled(db)
    }
}

impl RawStore for RawSled {
    fn write(&self, batch: &WriteBatch) {
        let mut b = sled::Batch::default();
        for_each_put(batch, |k, v| b.insert(k, v));
        self.0.apply_batch(b).unwrap();
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.get(key).unwrap().map(|v| v.to_vec())
    }
}

const RAW_TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("raw");

/// Raw redb, one table, non-durable commits.
pub struct RawRedb(redb::Database);

impl RawRedb {
    /// Creates a raw redb file at `path` with the cache share of `config`'s redb context.
    pub fn open(config: &BackendConfig, path: &Path) -> Self {
        let cache = config.redb.as_ref().unwrap().cache_bytes_per_bucket();
        let mut builder = redb::Builder::new();
        builder.set_cache_size(usize::try_from(cache).unwrap());
        RawRedb(builder.create(path).unwrap())
    }
}

impl RawStore for RawRedb {
    fn write(&self, batch: &WriteBatch) {
        let mut txn = self.0.begin_write().unwrap();
        txn.set_durability(redb::Durability::None).unwrap();
        {
            let mut table = txn.open_table(RAW_TABLE).unwrap();
            for_each_put(batch, |k, v| {
                table.insert(k, v).unwrap();
            });
        }
        txn.commit().unwrap();
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        use redb::ReadableDatabase;
        let txn = self.0.begin_read().unwrap();
        let table = match txn.open_table(RAW_TABLE) {
            Ok(t) => t,
            Err(_) => return None,
        };
        table.get(key).unwrap().map(|v| v.value().to_vec())
    }
}
