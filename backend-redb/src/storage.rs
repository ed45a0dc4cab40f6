//! [`RedbStorage`]: the redb primitives behind the shared disk-engine skeleton.

use std::path::{Path, PathBuf};

use engine_api::batch::Record;
use engine_api::covered::MetaRow;
use engine_api::disk::{LiveEntries, MetaKey, ReclaimRequest, ReclaimWork, Storage};
use engine_api::sweeper::{self, index_key};
use engine_api::{EngineOptions, Result};
use redb::{Database, Durability, ReadableDatabase, ReadableTableMetadata, WriteTransaction};

use crate::engine::RedbDiskStats;
use crate::error::{BACKEND, RedbResultExt};
use crate::sweep::RedbChunker;
use crate::tables::{BY_OFFSET, DATA, META};

/// One bucket's database file.
#[derive(Debug)]
pub(crate) struct RedbStorage {
    db: Database,
    file: PathBuf,
    sweep_chunk_rows: usize,
}

impl RedbStorage {
    /// Wraps an open database, creating its tables when missing (in one write transaction).
    pub(crate) fn new(db: Database, file: PathBuf, options: &EngineOptions) -> Result<Self> {
        let txn = db.begin_write().redb()?;
        // Opening the tables in a write transaction creates them on a fresh file.
        txn.open_table(DATA).redb()?;
        txn.open_table(BY_OFFSET).redb()?;
        txn.open_table(META).redb()?;
        txn.commit().redb()?;
        Ok(RedbStorage {
            db,
            file,
            sweep_chunk_rows: options.sweep_chunk_rows,
        })
    }

    pub(crate) fn file(&self) -> &Path {
        &self.file
    }

    fn file_bytes(&self) -> Result<u64> {
        Ok(std::fs::metadata(&self.file)?.len())
    }

    /// An empty durable commit: makes earlier non-durable commits durable and lets redb reuse
    /// the pages they freed.
    fn durable_barrier(&self) -> Result<()> {
        let mut txn = self.db.begin_write().redb()?;
        txn.set_durability(Durability::Immediate).redb()?;
        txn.commit().redb()
    }

    #[cfg(feature = "testing")]
    pub(crate) fn insert_index_row(&self, row: &[u8]) -> Result<()> {
        let txn = self.db.begin_write().redb()?;
        txn.open_table(BY_OFFSET).redb()?.insert(row, ()).redb()?;
        txn.commit().redb()
    }

    pub(crate) fn disk_stats(&self) -> Result<RedbDiskStats> {
        let txn = self.db.begin_write().redb()?;
        let stats = txn.stats().redb()?;
        txn.abort().redb()?;
        Ok(RedbDiskStats {
            file_bytes: self.file_bytes()?,
            stored_bytes: stats.stored_bytes(),
            metadata_bytes: stats.metadata_bytes(),
            fragmented_bytes: stats.fragmented_bytes(),
            allocated_pages: stats.allocated_pages(),
            page_size: stats.page_size() as u64,
        })
    }
}

fn put_meta(txn: &WriteTransaction, key: MetaKey, value: u64) -> Result<()> {
    let mut meta = txn.open_table(META).redb()?;
    meta.insert(
        key.name(),
        engine_api::disk::meta::encode_u64(value).as_slice(),
    )
    .redb()?;
    Ok(())
}

fn put_rows(txn: &WriteTransaction, rows: &[MetaRow]) -> Result<()> {
    let mut meta = txn.open_table(META).redb()?;
    for row in rows {
        match &row.value {
            Some(value) => {
                meta.insert(row.name.as_str(), value.as_slice()).redb()?;
            }
            None => {
                meta.remove(row.name.as_str()).redb()?;
            }
        }
    }
    Ok(())
}

fn durability(sync: bool) -> Durability {
    if sync {
        Durability::Immediate
    } else {
        Durability::None
    }
}

impl Storage for RedbStorage {
    const BACKEND: &'static str = BACKEND;

    fn read_meta(&self, key: MetaKey) -> Result<Option<Vec<u8>>> {
        let txn = self.db.begin_read().redb()?;
        let meta = txn.open_table(META).redb()?;
        Ok(meta.get(key.name()).redb()?.map(|v| v.value().to_vec()))
    }

    fn persist_meta(&self, key: MetaKey, value: u64) -> Result<()> {
        let txn = self.db.begin_write().redb()?; // Durability::Immediate is redb's default.
        put_meta(&txn, key, value)?;
        txn.commit().redb()
    }

    fn holds_data(&self) -> Result<bool> {
        let txn = self.db.begin_read().redb()?;
        let data = txn.open_table(DATA).redb()?;
        let index = txn.open_table(BY_OFFSET).redb()?;
        Ok(!data.is_empty().redb()? || !index.is_empty().redb()?)
    }

    fn read_meta_rows(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let txn = self.db.begin_read().redb()?;
        let meta = txn.open_table(META).redb()?;
        let mut rows = Vec::new();
        for row in meta.range(prefix..).redb()? {
            let (name, value) = row.redb()?;
            if !name.value().starts_with(prefix) {
                break;
            }
            rows.push((name.value().to_owned(), value.value().to_vec()));
        }
        Ok(rows)
    }

    fn write_meta_rows(&self, rows: &[MetaRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut txn = self.db.begin_write().redb()?;
        txn.set_durability(Durability::None).redb()?;
        put_rows(&txn, rows)?;
        txn.commit().redb()
    }

    fn commit(
        &self,
        writes: &[&Record],
        applied_end: u64,
        rows: &[MetaRow],
        sync: bool,
    ) -> Result<()> {
        let mut txn = self.db.begin_write().redb()?;
        txn.set_durability(durability(sync)).redb()?;
        {
            let mut data = txn.open_table(DATA).redb()?;
            let mut index = txn.open_table(BY_OFFSET).redb()?;
            for record in writes {
                let key = record.key();
                data.insert(key, record.encoded_value().as_slice()).redb()?;
                index
                    .insert(index_key(record.offset(), key).as_slice(), ())
                    .redb()?;
            }
        }
        // Same transaction as the rows: a crash can never separate them.
        put_meta(&txn, MetaKey::AppliedEnd, applied_end)?;
        put_rows(&txn, rows)?;
        txn.commit().redb()
    }

    /// Always inline: redb reads pages through its page cache; a point read is a few page reads of one B-tree path, from the cache when the bucket is warm, so it never blocks for long.
    fn get_inline<T>(
        &self,
        key: &[u8],
        read: impl FnOnce(Option<&[u8]>) -> Result<T>,
    ) -> Result<Option<T>> {
        self.get(key, read).map(Some)
    }

    fn get<T>(&self, key: &[u8], read: impl FnOnce(Option<&[u8]>) -> Result<T>) -> Result<T> {
        let txn = self.db.begin_read().redb()?;
        let data = txn.open_table(DATA).redb()?;
        let stored = data.get(key).redb()?;
        read(stored.as_ref().map(|guard| guard.value()))
    }

    fn reclaim(&self, request: ReclaimRequest) -> Result<ReclaimWork> {
        let bytes_before = self.file_bytes()?;
        let chunker = RedbChunker { db: &self.db };
        let totals = sweeper::sweep(&chunker, request.threshold, self.sweep_chunk_rows)?;
        if totals.chunks > 0 {
            // One fsync for the whole sweep, which also releases the freed pages for reuse.
            self.durable_barrier()?;
        }
        Ok(ReclaimWork {
            values_removed: totals.values_removed,
            tombstones_removed: totals.tombstones_removed,
            corrupt_kept: totals.corrupt_kept,
            bytes_before,
            bytes_after: self.file_bytes()?,
            bytes_rewritten: None,
            sweep: Some(totals),
        })
    }

    fn bytes_on_disk(&self) -> Result<u64> {
        self.file_bytes()
    }

    fn live_entries(&self) -> Result<LiveEntries> {
        let txn = self.db.begin_read().redb()?;
        let data = txn.open_table(DATA).redb()?;
        Ok(LiveEntries {
            count: data.len().redb()?,
            exact: true,
        })
    }

    fn flush(&self) -> Result<()> {
        // Always cheap enough, and it also covers the sweeper's and `insert_raw`'s commits.
        self.durable_barrier()
    }

    #[cfg(feature = "testing")]
    fn insert_raw(&self, key: &[u8], stored: &[u8]) -> Result<()> {
        let txn = self.db.begin_write().redb()?;
        {
            let mut data = txn.open_table(DATA).redb()?;
            data.insert(key, stored).redb()?;
            let mut index = txn.open_table(BY_OFFSET).redb()?;
            index.insert(index_key(0, key).as_slice(), ()).redb()?;
        }
        txn.commit().redb()
    }
}
