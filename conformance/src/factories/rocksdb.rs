//! rocksdb factory: [`backend_rocksdb::RocksDbEngine`] in the case's directory, opened from the
//! process-wide default context so every case shares one cache and one set of threads.

use std::path::Path;

use backend_rocksdb::{ContextOptions, RocksDbContext, RocksDbEngine};
use engine_api::{EngineOptions, OpenEngine, Result};

use crate::factory::{Capabilities, EngineFactory};

/// Opens [`RocksDbEngine`]s; RocksDB persists and accepts raw bytes, but only estimates the
/// number of live keys.
#[derive(Debug, Default, Clone, Copy)]
pub struct RocksDbFactory;

/// Bytes on disk above the empty store per byte of the uncovered window that RocksDB may hold in
/// `bytes_on_disk_bounded_by_the_window` (every file of its database directory: table files,
/// log, manifest, info log, options).
///
/// Measured with `cargo test -p tidemark-conformance --all-features --test rocksdb -- --exact rocksdb::bytes_on_disk_bounded_by_the_window`
/// (dev profile, 2-core sandbox, three runs): 1.03 at the end and at most over the last half,
/// every run. Each reclaim flushes and compacts to the bottom level, so the store is about one
/// table file of the window; the rest is the manifest and the info log, which grow by a few
/// hundred bytes per reclaim up to their caps (4 MiB, 2 × 1 MiB). 1.4: the measurement with about
/// 30 % headroom.
pub const ROCKSDB_WINDOW_MULTIPLE: f64 = 1.4;

impl EngineFactory for RocksDbFactory {
    type Engine = RocksDbEngine;
    const NAME: &'static str = "rocksdb";

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reopen: true,
            exact_live_entries: false,
            raw_injection: true,
            background_reclaim: true,
            offset_index: false,
            open_existing: true,
            read_only_files: true,
            files: true,
            faults: true,
        }
    }

    fn open(&self, dir: &Path, options: EngineOptions) -> Result<RocksDbEngine> {
        RocksDbEngine::open(dir, options)
    }

    fn window_multiple(&self) -> Option<f64> {
        Some(ROCKSDB_WINDOW_MULTIPLE)
    }

    fn inject_raw(&self, engine: &RocksDbEngine, key: &[u8], stored: &[u8]) -> Result<()> {
        engine.insert_raw(key, stored)
    }

    /// Flushes the memtables and compacts the `data` column family to the bottom level
    /// ([`RocksDbEngine::compact_to_bottom`]): `flush()` only syncs the WAL, so without this the
    /// older versions would still sit in the memtable beside the newer ones.
    fn settle(&self, engine: &RocksDbEngine) -> Result<()> {
        engine.compact_to_bottom()
    }

    fn faults<'a>(&self, engine: &'a RocksDbEngine) -> Option<&'a disk::fault::Faults> {
        Some(engine.faults())
    }

    /// Table files: every block RocksDB reads from one is checked against its checksum.
    fn reads_detect_damage_in(&self, file: &Path) -> bool {
        file.extension().is_some_and(|ext| ext == "sst")
    }
}

impl crate::scale::ScaleFactory for RocksDbFactory {
    type Context = backend_rocksdb::RocksDbContext;

    fn scale_context(&self, buckets: usize) -> Result<RocksDbContext> {
        RocksDbContext::for_buckets(buckets)
    }

    /// Memtables of 64 KiB (the least the context allows): every 64 KiB written flushes a table
    /// file.
    fn growing_context(&self, buckets: usize) -> Result<RocksDbContext> {
        RocksDbContext::new(ContextOptions {
            max_buckets: buckets,
            write_buffer_bytes: 64 << 10,
            ..ContextOptions::default()
        })
    }

    fn open_in(
        &self,
        context: &RocksDbContext,
        dir: &Path,
        options: EngineOptions,
    ) -> Result<RocksDbEngine> {
        RocksDbEngine::open_in(context, dir, options)
    }

    /// Each of the scenario's buckets holds one table file per column family after its reclaim.
    fn bounds(&self, context: &RocksDbContext, buckets: usize) -> disk::budget::ResourceBounds {
        context.bounds(buckets, 2)
    }
}
