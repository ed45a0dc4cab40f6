//! Reading a lake data file as Parquet through the table's `FileIO`, with each file's index (its
//! footer, page index and key bloom filters) kept in memory: data files are never rewritten in
//! place (a rewrite is a new file), and decoding a footer on every lookup was a fifth of a
//! lookup's time.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use iceberg::io::{FileIO, FileRead};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::bloom_filter::Sbbf;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use tidemark_bucket::{Error, Result};

use crate::error::lake_error;
use crate::rows::{BUCKET, KEY};

/// Bytes of file indexes kept at most. A file the tiering writer cut holds a footer of a few
/// kilobytes and an 8 KiB key filter per 4,096-row group: 64 MiB holds the indexes of about
/// 30 million rows.
const CACHED_INDEX_BYTES: usize = 64 * 1024 * 1024;

/// Bytes read from a file's end in one request when its footer is not cached: most footers fit,
/// and a larger one costs one more read.
const FOOTER_PREFETCH: usize = 64 * 1024;

/// What a lookup needs of a data file besides the pages it reads, read once per file: the
/// footer with its page index, where the bucket and key columns are, and each row group's key
/// bloom filter.
pub(crate) struct FileIndex {
    pub footer: ArrowReaderMetadata,
    pub bucket_column: usize,
    pub key_column: usize,
    /// One per row group; `None` where the file has no filter for the group's keys.
    pub key_filters: Vec<Option<Sbbf>>,
    /// Memory held, roughly.
    bytes: usize,
}

impl FileIndex {
    async fn read(bytes: &mut DataFileBytes, path: &str) -> Result<FileIndex> {
        let cannot_read =
            |e| lake_error(format!("cannot read the index of lake data file {path}"), e);
        let footer = ArrowReaderMetadata::load_async(bytes, ArrowReaderOptions::new())
            .await
            .map_err(cannot_read)?;
        let schema = footer.parquet_schema();
        let leaf = |name: &str| {
            schema
                .columns()
                .iter()
                .position(|c| c.name() == name)
                .ok_or_else(|| {
                    Error::lake(format!("the lake data file {path} has no `{name}` column"))
                })
        };
        let (bucket_column, key_column) = (leaf(BUCKET)?, leaf(KEY)?);
        let mut key_filters = Vec::new();
        let mut filter_bytes = 0;
        for group in footer.metadata().row_groups() {
            let chunk = group.column(key_column);
            // A filter whose length the footer does not record is not read: the group is then
            // judged by its bounds alone.
            let filter = match (chunk.bloom_filter_offset(), chunk.bloom_filter_length()) {
                (Some(offset), Some(length)) => {
                    let start = u64::try_from(offset).map_err(|e| cannot_read(e.into()))?;
                    let end = start + u64::try_from(length).map_err(|e| cannot_read(e.into()))?;
                    let raw = bytes.get_bytes(start..end).await.map_err(cannot_read)?;
                    let filter = Sbbf::from_bytes(&raw).map_err(cannot_read)?;
                    filter_bytes += raw.len();
                    Some(filter)
                }
                _ => None,
            };
            key_filters.push(filter);
        }
        let bytes = footer.metadata().memory_size() + filter_bytes;
        Ok(FileIndex {
            footer,
            bucket_column,
            key_column,
            key_filters,
            bytes,
        })
    }
}

/// The indexes of data files, by path, shared by every lookuper of a lake.
pub(crate) struct FileIndexes {
    cached: Mutex<Cached>,
    /// Bytes of indexes kept at most.
    capacity: usize,
}

impl Default for FileIndexes {
    fn default() -> Self {
        FileIndexes::with_capacity(CACHED_INDEX_BYTES)
    }
}

#[derive(Default)]
struct Cached {
    by_path: HashMap<String, Arc<FileIndex>>,
    bytes: usize,
}

impl std::fmt::Debug for FileIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.lock();
        f.debug_struct("FileIndexes")
            .field("files", &cached.by_path.len())
            .field("bytes", &cached.bytes)
            .finish()
    }
}

impl FileIndexes {
    pub(crate) fn with_capacity(capacity: usize) -> FileIndexes {
        FileIndexes {
            cached: Mutex::default(),
            capacity,
        }
    }

    /// Whether the index of `path` is held.
    #[cfg(test)]
    pub(crate) fn holds(&self, path: &str) -> bool {
        self.lock().by_path.contains_key(path)
    }

    /// Indexes held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().by_path.len()
    }

    fn get(&self, path: &str) -> Option<Arc<FileIndex>> {
        self.lock().by_path.get(path).cloned()
    }

    fn insert(&self, path: &str, index: Arc<FileIndex>) {
        let mut cached = self.lock();
        cached.bytes += index.bytes;
        if let Some(replaced) = cached.by_path.insert(path.to_owned(), index) {
            cached.bytes -= replaced.bytes;
        }
        // Any other entry will do: expired files' indexes go this way, and a live one evicted
        // is read again on its next lookup.
        while cached.bytes > self.capacity {
            let Some(evicted) = cached.by_path.keys().find(|p| p.as_str() != path).cloned() else {
                break;
            };
            if let Some(index) = cached.by_path.remove(&evicted) {
                cached.bytes -= index.bytes;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        // Only map operations happen under the lock; a panic in one leaves the map usable.
        self.cached.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Opens the data file at `path` (`size` bytes, as its manifest entry says) for Parquet's record
/// batch stream.
pub(crate) async fn open(file_io: &FileIO, path: &str, size: u64) -> Result<DataFileBytes> {
    let cannot_open = |e| lake_error(format!("cannot open the lake data file {path}"), e);
    let read = file_io
        .new_input(path)
        .map_err(cannot_open)?
        .reader()
        .await
        .map_err(cannot_open)?;
    Ok(DataFileBytes { read, size })
}

/// The index of the data file at `path`, from `indexes`, or read from the file and kept there.
pub(crate) async fn index(
    file_io: &FileIO,
    indexes: &FileIndexes,
    path: &str,
    size: u64,
) -> Result<Arc<FileIndex>> {
    if let Some(index) = indexes.get(path) {
        return Ok(index);
    }
    let mut bytes = open(file_io, path, size).await?;
    let index = Arc::new(FileIndex::read(&mut bytes, path).await?);
    indexes.insert(path, Arc::clone(&index));
    Ok(index)
}

/// Ranges at most this far apart are read together.
const READ_GAP: u64 = 16 * 1024;

/// The reads that cover `ranges`: sorted by start, with ranges less than `gap` apart merged.
fn coalesce(ranges: &[Range<u64>], gap: u64) -> Vec<Range<u64>> {
    let mut sorted: Vec<Range<u64>> = ranges.iter().filter(|r| r.start < r.end).cloned().collect();
    sorted.sort_unstable_by_key(|r| r.start);
    let mut reads: Vec<Range<u64>> = Vec::with_capacity(sorted.len());
    for range in sorted {
        match reads.last_mut() {
            Some(last) if range.start <= last.end.saturating_add(gap) => {
                last.end = last.end.max(range.end);
            }
            _ => reads.push(range),
        }
    }
    reads
}

/// Parquet's view of a data file: byte ranges, and a footer read from its end.
pub(crate) struct DataFileBytes {
    read: Box<dyn FileRead>,
    size: u64,
}

impl AsyncFileReader for DataFileBytes {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.read
            .read(range)
            .map(|read| read.map_err(|e| ParquetError::External(Box::new(e))))
            .boxed()
    }

    /// Pages close together are fetched in one read: a lookup asks for one or a few pages of
    /// each column, and on a local file a read's fixed cost outweighs copying a short gap.
    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let reads = coalesce(&ranges, READ_GAP);
            let mut fetched = Vec::with_capacity(reads.len());
            for read in &reads {
                let bytes = self
                    .read
                    .read(read.clone())
                    .await
                    .map_err(|e| ParquetError::External(Box::new(e)))?;
                fetched.push(bytes);
            }
            ranges
                .iter()
                .map(|range| {
                    // The read that starts last at or before the range holds it.
                    let i = reads.partition_point(|r| r.start <= range.start);
                    let read = i
                        .checked_sub(1)
                        .and_then(|i| Some((reads.get(i)?, fetched.get(i)?)));
                    let Some((read, bytes)) = read else {
                        return Err(ParquetError::General(format!(
                            "no read covers bytes {range:?}"
                        )));
                    };
                    let start = usize::try_from(range.start - read.start);
                    let end = usize::try_from(range.end - read.start);
                    match (start, end) {
                        (Ok(start), Ok(end)) if end <= bytes.len() => Ok(bytes.slice(start..end)),
                        _ => Err(ParquetError::General(format!(
                            "a read of {} bytes does not hold bytes {range:?}",
                            bytes.len()
                        ))),
                    }
                })
                .collect()
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            // The page index: the key pages' bounds choose the rows a lookup reads, and the
            // offset index lets it fetch only their pages.
            let size = self.size;
            let footer = ParquetMetaDataReader::new()
                .with_prefetch_hint(Some(FOOTER_PREFETCH))
                .with_page_index_policy(PageIndexPolicy::Optional)
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(footer))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearby_ranges_are_read_together_and_far_ones_apart() {
        let reads = coalesce(&[30..40, 0..10, 12..20, 100..110, 5..8, 50..50], 5);
        assert_eq!(reads, vec![0..20, 30..40, 100..110]);
        assert_eq!(coalesce(&[0..10, 15..20], 5), vec![0..20]);
        assert_eq!(coalesce(&[0..10, 16..20], 5), vec![0..10, 16..20]);
        assert!(coalesce(&[], 5).is_empty());
    }

    #[tokio::test]
    async fn indexes_beyond_the_capacity_evict_others_and_are_read_again() {
        use engine_api::batch::Record;

        let dir = tempfile::tempdir().unwrap();
        let lake = crate::lake::IcebergLake::open(dir.path()).await.unwrap();
        let writer = lake.tiering_writer().await.unwrap();
        for commit in 0..3u64 {
            let records =
                (0..1_000).map(|i| Record::put(format!("k-{i:04}"), "v", commit * 1_000 + i));
            writer.append(1, records).await.unwrap();
            writer.commit(&[(1, (commit + 1) * 1_000)]).await.unwrap();
        }
        let table = lake.table().await.unwrap();
        let mut files: Vec<(String, u64)> = crate::testing::planned_files(&table, None)
            .await
            .into_iter()
            .map(|t| (t.data_file_path, t.file_size_in_bytes))
            .collect();
        files.sort();
        assert_eq!(files.len(), 3);
        async fn open_all(
            file_io: &FileIO,
            indexes: &FileIndexes,
            files: &[(String, u64)],
        ) -> Vec<usize> {
            let mut sizes = Vec::new();
            for (path, size) in files {
                let index = index(file_io, indexes, path, *size).await.unwrap();
                sizes.push(index.bytes);
            }
            sizes
        }
        let unbounded = FileIndexes::default();
        let sizes = open_all(table.file_io(), &unbounded, &files).await;
        assert_eq!(unbounded.len(), 3);
        assert!(sizes.iter().all(|b| *b > 0));

        // Room for two of the three: the last one read stays, one other is evicted.
        let two = sizes.iter().max().unwrap() * 2 + sizes.iter().min().unwrap() / 2;
        let bounded = FileIndexes::with_capacity(two);
        open_all(table.file_io(), &bounded, &files).await;
        assert_eq!(bounded.len(), 2);
        assert!(bounded.holds(&files[2].0));
        assert!(bounded.lock().bytes <= two);
        // An evicted file's index is read again and kept.
        let evicted = files.iter().find(|(p, _)| !bounded.holds(p)).unwrap();
        let again = index(table.file_io(), &bounded, &evicted.0, evicted.1)
            .await
            .unwrap();
        assert!(bounded.holds(&evicted.0));
        assert_eq!(
            again.key_filters.len(),
            again.footer.metadata().num_row_groups()
        );
    }
}
