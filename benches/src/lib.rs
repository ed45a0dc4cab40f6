//! Shared workload and raw-engine baselines for the Tidemark benchmarks.
//!
//! The raw baselines write the same keys and payloads with each engine's native API — no offset
//! tag, no index, no metadata — tuned like that backend's buckets, so a benchmark can quote the
//! cost of Tidemark's bookkeeping as a ratio measured in one run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::ExitCode;

use sled::Transactional;
use tidemark::{Backend, BackendConfig, Engine, EngineHandle, EngineOptions};
use tidemark_disk::offset_index::index_key;
use tidemark_engine_api::{Record, WriteBatch};
use tidemark_test_support::rng::SplitMix64;
use tidemark_test_support::stream::{Cursor, PutStream};

/// Keys in the benchmark key space.
pub const KEYS: u64 = 10_000;
/// Payload bytes per value.
pub const VALUE_SIZE: usize = 128;
/// Records per batch.
pub const BATCH: u64 = 100;
/// Spreads consecutive offsets over the key space: a prime, so coprime to every key count used
/// here (multiples of 10), and `offset * STRIDE mod n` visits every key once per `n` offsets.
pub const STRIDE: u64 = 7919;
/// One key in this many is deleted in the read state ([`read_state`]).
pub const DEAD_EVERY: u64 = 10;

/// The `i`-th distinct key (fixed width, so every engine sees byte strings of one length).
pub fn nth_key(i: u64) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

/// The key for index `i` of the key space.
pub fn key(i: u64) -> Vec<u8> {
    nth_key(i % KEYS)
}

/// A deterministic, incompressible payload for offset `offset`: neither side gains from
/// RocksDB's LZ4, and bytes on disk follow the bytes written.
pub fn payload(offset: u64) -> Vec<u8> {
    SplitMix64::new(offset).bytes(VALUE_SIZE)
}

/// The key the stream writes at `offset`: the key space walked with [`STRIDE`], so a batch
/// spreads over it and every key is written again exactly [`KEYS`] offsets later.
pub fn stream_key(offset: u64) -> Vec<u8> {
    key(offset % KEYS * STRIDE)
}

/// A key no other offset writes: `offset` scrambled by a bijection of `u64` (multiplication by
/// an odd constant), so consecutive inserts land all over the key range, never appended in order.
pub fn fresh_key(offset: u64) -> Vec<u8> {
    format!("key-{:016x}", offset.wrapping_mul(0x9e37_79b9_7f4a_7c15)).into_bytes()
}

/// The write stream of the write benchmarks: puts of [`payload`] at consecutive offsets from 0.
pub type Stream = Cursor<PutStream>;

/// Overwrites: the key of offset `o` is [`stream_key`]`(o)`, every key rewritten every [`KEYS`]
/// offsets.
pub fn overwriting() -> Stream {
    Cursor::new(PutStream::new(stream_key, payload))
}

/// Inserts: the key of offset `o` is [`fresh_key`]`(o)`, never written again, so an entry stays
/// the key's newest until it is removed.
pub fn inserting() -> Stream {
    Cursor::new(PutStream::new(fresh_key, payload))
}

/// Set-up writes go in batches of this many records (cheap to apply).
pub const SETUP_BATCH: u64 = 1_000;

/// The state every write benchmark starts from (and the stream continuing it): every key written
/// twice, so writes overwrite existing keys, as in a bucket that has been running.
pub fn write_state() -> (Vec<WriteBatch>, Stream) {
    let mut stream = overwriting();
    (stream.next_batches(2 * KEYS, SETUP_BATCH), stream)
}

/// The state the read benchmarks read: [`write_state`], then every [`DEAD_EVERY`]-th key deleted
/// (a tombstone for Tidemark, a native delete for a raw store), so hits, deleted keys and misses
/// interleave in key order.
pub fn read_state() -> Vec<WriteBatch> {
    let (mut batches, stream) = write_state();
    let mut deletes = WriteBatch::new();
    for (offset, key) in (stream.next_offset()..).zip(read_keys(Read::Deleted)) {
        deletes.delete(key, offset);
    }
    batches.push(deletes);
    batches
}

/// Which keys of [`read_state`] a lookup asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// A key holding a value.
    Hit,
    /// A deleted key (Tidemark holds a tombstone).
    Deleted,
    /// A key never written, sorting between written ones.
    Missing,
}

/// The keys of `read` in the order a benchmark asks for them (the key space walked with
/// [`STRIDE`], so consecutive lookups land far apart).
pub fn read_keys(read: Read) -> Vec<Vec<u8>> {
    let dead = |i: u64| i % DEAD_EVERY == DEAD_EVERY - 1;
    (0..KEYS)
        .map(|n| n * STRIDE % KEYS)
        .filter_map(|i| match read {
            Read::Hit => (!dead(i)).then(|| key(i)),
            Read::Deleted => dead(i).then(|| key(i)),
            Read::Missing => Some([key(i), b"~".to_vec()].concat()),
        })
        .collect()
}

/// The key of offset `offset` in a bucket of `records` distinct keys filled by [`fill`]
/// (a permutation of the first `records` keys, so covered keys spread over the key range).
pub fn fill_key(offset: u64, records: u64) -> Vec<u8> {
    nth_key(offset * STRIDE % records)
}

/// A bucket of `records` distinct keys at offsets `0..records`, in batches of 1,000. `records`
/// must be coprime to [`STRIDE`].
pub fn fill(records: u64) -> Vec<WriteBatch> {
    assert_ne!(records % STRIDE, 0, "{records} keys are not a permutation");
    (0..records)
        .step_by(1_000)
        .map(|first| {
            (first..(first + 1_000).min(records))
                .map(|offset| Record::put(fill_key(offset, records), payload(offset), offset))
                .collect()
        })
        .collect()
}

/// The exit code of the benchmark binary `name` whose run ended with `result`: on an error, a
/// failure, after the error is printed to standard error.
pub fn exit_code<E: std::fmt::Display>(name: &str, result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
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

/// The backends with a raw baseline: every compiled disk backend (the memory engine is a
/// `BTreeMap`, with no engine underneath to compare against).
pub fn disk_backends() -> Vec<Backend> {
    Backend::compiled()
        .into_iter()
        .filter(|b| b.is_persistent())
        .collect()
}

/// The disk backends a report binary's `--backends` names, or every compiled one when it names
/// none; a name that is no compiled backend ends the report with the parse error.
pub fn chosen_backends(names: &[String]) -> Vec<Backend> {
    if names.is_empty() {
        return disk_backends();
    }
    names
        .iter()
        .map(|name| name.parse().unwrap_or_else(|e| panic!("{name}: {e}")))
        .collect()
}

/// Opens a tagged bucket of `backend` at `path` from `config`. Writes are not synced, like the
/// raw baselines': the benchmarks compare bookkeeping, not fsync latency (the watermark is
/// durable whatever this says).
pub fn open_tagged(backend: Backend, config: &BackendConfig, path: &Path) -> EngineHandle {
    let options = EngineOptions::default().with_sync_writes(false);
    backend.open_with(path, options, config).unwrap()
}

/// Settles a tagged bucket's writes into its files: a durable flush, then a reclaim with nothing
/// covered (RocksDB: a flush and a compaction to the bottom level). The raw twin is
/// [`RawStore::settle`].
pub fn settle(engine: &dyn Engine) {
    engine.flush().unwrap();
    engine.reclaim().unwrap();
}

/// A raw engine without Tidemark's tagging, for baselines.
pub trait RawStore: Send + Sync {
    /// Writes the batch natively (untagged, unsynced): a put as a put, a delete as a delete.
    fn write(&self, batch: &WriteBatch);
    /// Reads a key natively.
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;
    /// Writes `key` durably before it returns (into a table of its own): the raw counterpart of
    /// Tidemark's durable watermark write.
    fn put_durable(&self, key: &[u8], value: &[u8]);
    /// Removes `keys` physically, as durably as the backend's reclaim: the raw counterpart of a
    /// reclaim, given the keys that Tidemark finds through its watermark.
    fn remove(&self, keys: &[Vec<u8>]);
    /// Settles what was written into the files, like [`settle`] does for a tagged bucket.
    fn settle(&self);
}

/// What a raw baseline writes per record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawLayout {
    /// The key and payload only.
    Data,
    /// Also an `offset ‖ key` row in an index table, in the same transaction: what sled's and
    /// redb's tagged buckets write besides the data row, without the tag, the checksum and the
    /// metadata. Only for splitting the cost of a write: [`RawStore::remove`] leaves the index.
    DataAndIndex,
}

/// The benchmark name of `backend`'s raw baseline with `layout`.
pub fn raw_name(backend: Backend, layout: RawLayout) -> String {
    match layout {
        RawLayout::Data => format!("raw-{}", backend.name()),
        RawLayout::DataAndIndex => format!("raw-{}+index", backend.name()),
    }
}

/// Opens `backend`'s raw baseline at `path` with the tuning `config` gives that backend's
/// buckets; `None` for the memory backend, and for an index on RocksDB (its tagged buckets keep
/// none).
pub fn open_raw(
    backend: Backend,
    layout: RawLayout,
    config: &BackendConfig,
    path: &Path,
) -> Option<Box<dyn RawStore>> {
    let indexed = layout == RawLayout::DataAndIndex;
    match backend {
        Backend::RocksDb if !indexed => Some(Box::new(RawRocks::open(config, path))),
        Backend::Sled => Some(Box::new(RawSled::open(config, path, indexed))),
        Backend::Redb => Some(Box::new(RawRedb::open(config, path, indexed))),
        Backend::Fjall if !indexed => Some(Box::new(RawFjall::open(config, path))),
        _ => None,
    }
}

/// Every record of `batch` as `(key, payload, offset)`; the payload is `None` for a delete.
fn records(batch: &WriteBatch) -> impl Iterator<Item = (&[u8], Option<&[u8]>, u64)> {
    batch.records().iter().map(|r| match r {
        Record::Put { key, value, offset } => (key.as_slice(), Some(value.as_slice()), *offset),
        Record::Delete { key, offset } => (key.as_slice(), None, *offset),
    })
}

/// Raw fjall: its own database tuned exactly like the buckets' shared one (the settings of the
/// shared context), one keyspace created like a bucket's `data` keyspace.
pub struct RawFjall {
    // Declared first: the keyspace handle goes before the database closes.
    data: tidemark::fjall::fjall::Keyspace,
    db: tidemark::fjall::fjall::Database,
}

impl RawFjall {
    /// Opens a raw fjall database at `path` with the settings of `config`'s fjall context.
    pub fn open(config: &BackendConfig, path: &Path) -> Self {
        use tidemark::BackendContext as _;
        let context = match config.context::<tidemark::fjall::FjallStorage>() {
            Some(context) => context.clone(),
            None => tidemark::fjall::FjallContext::global().unwrap(),
        };
        let settings = context.settings();
        let db = tidemark::fjall::tuned_builder(path, settings)
            .open()
            .unwrap();
        let memtable = settings.memtable_bytes.max(64 << 10);
        let data = db
            .keyspace("data", || tidemark::fjall::data_keyspace_options(memtable))
            .unwrap();
        RawFjall { data, db }
    }

    /// Flushes the memtable, then major-compacts the keyspace, as a tagged reclaim does.
    fn flush_and_compact(&self) {
        tidemark::fjall::flush_keyspaces(&self.db, &[&self.data]).unwrap();
        self.data.major_compact().unwrap();
    }
}

impl RawStore for RawFjall {
    fn write(&self, batch: &WriteBatch) {
        let mut wb = self.db.batch();
        for (k, v, _) in records(batch) {
            match v {
                Some(v) => wb.insert(&self.data, k, v),
                None => wb.remove(&self.data, k),
            }
        }
        wb.commit().unwrap();
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.data.get(key).unwrap().map(|v| v.to_vec())
    }
    /// A synced write, as the bucket's watermark write is.
    fn put_durable(&self, key: &[u8], value: &[u8]) {
        let mut wb = self
            .db
            .batch()
            .durability(Some(tidemark::fjall::fjall::PersistMode::SyncAll));
        wb.insert(&self.data, key, value);
        wb.commit().unwrap();
    }
    /// Deletes, then the flush and major compaction that make them physical.
    fn remove(&self, keys: &[Vec<u8>]) {
        let mut wb = self.db.batch();
        keys.iter()
            .for_each(|k| wb.remove(&self.data, k.as_slice()));
        wb.commit().unwrap();
        self.flush_and_compact();
    }
    fn settle(&self) {
        self.flush_and_compact();
    }
}

/// Raw RocksDB, tuned exactly like the buckets (the options of the shared context), in its
/// default column family.
pub struct RawRocks(rocksdb::DB);

impl RawRocks {
    /// Opens a raw RocksDB at `path` with the options of `config`'s RocksDB context.
    pub fn open(config: &BackendConfig, path: &Path) -> Self {
        let mut opts = config
            .context::<tidemark::rocksdb::RocksDbStorage>()
            .unwrap()
            .db_options();
        opts.create_if_missing(true);
        RawRocks(rocksdb::DB::open(&opts, path).unwrap())
    }

    /// Flushes the memtable, then compacts everything to the bottom level the way a tagged
    /// RocksDB reclaim does (bottom files rewritten, not exclusive).
    fn flush_and_compact(&self) {
        let mut flush = rocksdb::FlushOptions::default();
        flush.set_wait(true);
        self.0.flush_opt(&flush).unwrap();
        let mut compact = rocksdb::CompactOptions::default();
        compact.set_exclusive_manual_compaction(false);
        compact.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::ForceOptimized);
        self.0
            .compact_range_opt(None::<&[u8]>, None::<&[u8]>, &compact);
    }

    fn write_unsynced(&self, wb: rocksdb::WriteBatch) {
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(false);
        self.0.write_opt(wb, &wo).unwrap();
    }
}

impl RawStore for RawRocks {
    fn write(&self, batch: &WriteBatch) {
        let mut wb = rocksdb::WriteBatch::default();
        for (k, v, _) in records(batch) {
            match v {
                Some(v) => wb.put(k, v),
                None => wb.delete(k),
            }
        }
        self.write_unsynced(wb);
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.get(key).unwrap()
    }
    /// A synced put, as the bucket's watermark write is.
    fn put_durable(&self, key: &[u8], value: &[u8]) {
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(true);
        self.0.put_opt(key, value, &wo).unwrap();
    }
    /// Deletes, then the flush and compaction that make them physical (a RocksDB delete only
    /// writes a marker; a tagged reclaim likewise flushes and compacts).
    fn remove(&self, keys: &[Vec<u8>]) {
        let mut wb = rocksdb::WriteBatch::default();
        keys.iter().for_each(|k| wb.delete(k));
        self.write_unsynced(wb);
        self.flush_and_compact();
    }
    fn settle(&self) {
        self.flush_and_compact();
    }
}

/// Raw sled with a bucket's cache share. sled's own flusher thread runs every 500 ms, as the
/// sled context's one flusher does for the buckets.
pub struct RawSled {
    db: sled::Db,
    data: sled::Tree,
    index: Option<sled::Tree>,
    meta: sled::Tree,
}

impl RawSled {
    /// Opens a raw sled database at `path` with the cache share of `config`'s sled context; with
    /// `indexed`, writes also an index row per record ([`RawLayout::DataAndIndex`]).
    pub fn open(config: &BackendConfig, path: &Path, indexed: bool) -> Self {
        let cache = config
            .context::<tidemark::sled::SledStorage>()
            .unwrap()
            .cache_bytes_per_bucket();
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache)
            .open()
            .unwrap();
        let tree = |name: &str| db.open_tree(name).unwrap();
        RawSled {
            data: tree("data"),
            index: indexed.then(|| tree("by_offset")),
            meta: tree("meta"),
            db,
        }
    }
}

impl RawStore for RawSled {
    /// One batch on the data tree; with the index, one transaction over both trees (sled's batch
    /// covers one tree, and the index row must commit with its data row).
    fn write(&self, batch: &WriteBatch) {
        if let Some(index) = &self.index {
            (&self.data, index)
                .transaction(|(data, index)| {
                    for (k, v, offset) in records(batch) {
                        match v {
                            Some(v) => data.insert(k, v)?,
                            None => data.remove(k)?,
                        };
                        index.insert(index_key(offset, k), &[][..])?;
                    }
                    Ok::<_, sled::transaction::ConflictableTransactionError>(())
                })
                .unwrap();
        } else {
            let mut b = sled::Batch::default();
            for (k, v, _) in records(batch) {
                match v {
                    Some(v) => b.insert(k, v),
                    None => b.remove(k),
                }
            }
            self.data.apply_batch(b).unwrap();
        }
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.data.get(key).unwrap().map(|v| v.to_vec())
    }
    /// An insert and a flush, as the bucket's watermark write is.
    fn put_durable(&self, key: &[u8], value: &[u8]) {
        self.meta.insert(key, value).unwrap();
        self.db.flush().unwrap();
    }
    /// One batch of removals, not flushed: a tagged sled reclaim does not flush either.
    fn remove(&self, keys: &[Vec<u8>]) {
        let mut b = sled::Batch::default();
        keys.iter().for_each(|k| b.remove(k.as_slice()));
        self.data.apply_batch(b).unwrap();
    }
    fn settle(&self) {
        self.db.flush().unwrap();
    }
}

const RAW_DATA: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("data");
const RAW_INDEX: redb::TableDefinition<&[u8], ()> = redb::TableDefinition::new("by_offset");
const RAW_META: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("meta");

/// Raw redb with a bucket's cache share: writes commit without an fsync (`Durability::None`),
/// as a bucket's unsynced writes do.
pub struct RawRedb {
    db: redb::Database,
    indexed: bool,
}

impl RawRedb {
    /// Creates a raw redb file at `path` with the cache share of `config`'s redb context (and
    /// its tables, as a tagged bucket does at open); with `indexed`, writes also an index row
    /// per record ([`RawLayout::DataAndIndex`]).
    pub fn open(config: &BackendConfig, path: &Path, indexed: bool) -> Self {
        let cache = config
            .context::<tidemark::redb::RedbStorage>()
            .unwrap()
            .cache_bytes_per_bucket();
        let mut builder = redb::Builder::new();
        builder.set_cache_size(usize::try_from(cache).unwrap());
        let db = builder.create(path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(RAW_DATA).unwrap();
        txn.open_table(RAW_INDEX).unwrap();
        txn.open_table(RAW_META).unwrap();
        txn.commit().unwrap();
        RawRedb { db, indexed }
    }

    /// Runs `f` in one write transaction committed with `durability`.
    fn commit(&self, durability: redb::Durability, f: impl FnOnce(&redb::WriteTransaction)) {
        let mut txn = self.db.begin_write().unwrap();
        txn.set_durability(durability).unwrap();
        f(&txn);
        txn.commit().unwrap();
    }
}

impl RawStore for RawRedb {
    fn write(&self, batch: &WriteBatch) {
        self.commit(redb::Durability::None, |txn| {
            let mut data = txn.open_table(RAW_DATA).unwrap();
            let mut index = self.indexed.then(|| txn.open_table(RAW_INDEX).unwrap());
            for (k, v, offset) in records(batch) {
                match v {
                    Some(v) => data.insert(k, v),
                    None => data.remove(k),
                }
                .unwrap();
                if let Some(index) = &mut index {
                    index.insert(index_key(offset, k).as_slice(), ()).unwrap();
                }
            }
        });
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        use redb::ReadableDatabase;
        let txn = self.db.begin_read().unwrap();
        let table = txn.open_table(RAW_DATA).unwrap();
        table.get(key).unwrap().map(|v| v.value().to_vec())
    }
    /// An immediately durable commit, as the bucket's watermark write is.
    fn put_durable(&self, key: &[u8], value: &[u8]) {
        self.commit(redb::Durability::Immediate, |txn| {
            txn.open_table(RAW_META)
                .unwrap()
                .insert(key, value)
                .unwrap();
        });
    }
    /// One durable transaction: a tagged redb reclaim ends with one durable commit too.
    fn remove(&self, keys: &[Vec<u8>]) {
        self.commit(redb::Durability::Immediate, |txn| {
            let mut data = txn.open_table(RAW_DATA).unwrap();
            for k in keys {
                data.remove(k.as_slice()).unwrap();
            }
        });
    }
    /// An empty durable commit, as a tagged redb flush is.
    fn settle(&self) {
        self.commit(redb::Durability::Immediate, |_| {});
    }
}
