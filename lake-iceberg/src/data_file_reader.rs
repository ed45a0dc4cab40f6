//! Reading a lake data file as Parquet through the table's `FileIO`, with each file's index (its
//! footer, page index and key bloom filters) kept in memory: data files are never rewritten in
//! place (a rewrite is a new file), and decoding a footer on every lookup was a fifth of a
//! lookup's time.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
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
        let size = bytes.size;
        check_footer(footer.metadata(), size).map_err(|problem| {
            Error::lake(format!("the lake data file {path} is damaged: {problem}"))
        })?;
        let mut key_filters = Vec::new();
        let mut filter_bytes = 0;
        for group in footer.metadata().row_groups() {
            let chunk = group.column(key_column);
            // A filter the footer does not place within the file, or that does not parse as a
            // whole number of blocks, is not used: the group is then judged by its bounds alone.
            let within = |offset: i64, length: i32| {
                let start = u64::try_from(offset).ok()?;
                let end = start.checked_add(u64::try_from(length).ok()?)?;
                (end <= size).then_some(start..end)
            };
            let filter = match (chunk.bloom_filter_offset(), chunk.bloom_filter_length()) {
                (Some(offset), Some(length)) => match within(offset, length) {
                    Some(range) => {
                        let raw = bytes.get_bytes(range).await.map_err(cannot_read)?;
                        filter_bytes += raw.len();
                        whole_filter(&raw)
                    }
                    None => None,
                },
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

/// The bloom filter `raw` holds (header and bitset), if it parses to the blocks it declares: Parquet
/// drops a partial block and answers from no blocks at all with a panic, and a filter with its
/// blocks shifted would rule out keys it holds.
fn whole_filter(raw: &[u8]) -> Option<Sbbf> {
    let filter = Sbbf::from_bytes(raw).ok()?;
    if filter.num_blocks() == 0 {
        return None;
    }
    // Written again, a whole filter takes exactly the bytes it was read from.
    let mut rewritten = Vec::with_capacity(raw.len());
    filter.write(&mut rewritten).ok()?;
    (rewritten.len() == raw.len()).then_some(filter)
}

/// What the reader relies on in a footer, checked once so a damaged file is an error instead of
/// a panic inside Parquet: row counts that are not negative and add up to the file's, and pages
/// that lie within the file in row order within their group.
fn check_footer(footer: &ParquetMetaData, size: u64) -> std::result::Result<(), String> {
    let mut total: i64 = 0;
    for (g, group) in footer.row_groups().iter().enumerate() {
        let rows = group.num_rows();
        total = total
            .checked_add(rows)
            .filter(|_| rows >= 0)
            .ok_or_else(|| format!("row group {g} claims {rows} rows"))?;
        let Some(columns) = footer.offset_index().and_then(|index| index.get(g)) else {
            continue;
        };
        for (c, column) in columns.iter().enumerate() {
            let mut previous: Option<i64> = None;
            for page in column.page_locations() {
                let first = page.first_row_index;
                let in_order =
                    first >= 0 && (first < rows || rows == 0) && previous.is_none_or(|p| first > p);
                let end = u64::try_from(page.offset).ok().and_then(|start| {
                    start.checked_add(u64::try_from(page.compressed_page_size).ok()?)
                });
                if !in_order || end.is_none_or(|end| end > size) {
                    return Err(format!(
                        "a page of column {c} in row group {g} is out of place (row {first}, \
                         bytes from {})",
                        page.offset
                    ));
                }
                previous = Some(first);
            }
        }
    }
    let declared = footer.file_metadata().num_rows();
    if total != declared {
        return Err(format!(
            "its row groups hold {total} rows, its footer says {declared}"
        ));
    }
    Ok(())
}

/// What a lake's lookups have read from its data files. On an object store every read is one
/// ranged GET request; on a local warehouse, one positioned read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataFileReads {
    /// Data file indexes (footer, page index, bloom filters) read: once per file while its
    /// index stays cached.
    pub indexes: u64,
    /// Reads (requests), indexes' included.
    pub reads: u64,
    /// Bytes those reads returned.
    pub bytes: u64,
}

/// The counters behind [`DataFileReads`], shared with every open data file.
#[derive(Debug, Default)]
pub(crate) struct ReadCounters {
    indexes: AtomicU64,
    reads: AtomicU64,
    bytes: AtomicU64,
}

impl ReadCounters {
    fn read(&self, bytes: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// The indexes of data files, by path, shared by every lookuper of a lake, and what the
/// lookups read.
pub(crate) struct FileIndexes {
    cached: Mutex<Cached>,
    /// Bytes of indexes kept at most.
    capacity: usize,
    counters: Arc<ReadCounters>,
}

impl Default for FileIndexes {
    fn default() -> Self {
        FileIndexes::with_capacity(CACHED_INDEX_BYTES)
    }
}

#[derive(Default)]
struct Cached {
    /// By path and size: a path written again with other content (not something the table's
    /// writers do) is not answered from the old file's index.
    by_file: HashMap<(String, u64), Arc<FileIndex>>,
    bytes: usize,
}

impl std::fmt::Debug for FileIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.lock();
        f.debug_struct("FileIndexes")
            .field("files", &cached.by_file.len())
            .field("bytes", &cached.bytes)
            .finish()
    }
}

impl FileIndexes {
    pub(crate) fn with_capacity(capacity: usize) -> FileIndexes {
        FileIndexes {
            cached: Mutex::default(),
            capacity,
            counters: Arc::default(),
        }
    }

    /// What the lookups have read so far.
    pub(crate) fn reads(&self) -> DataFileReads {
        DataFileReads {
            indexes: self.counters.indexes.load(Ordering::Relaxed),
            reads: self.counters.reads.load(Ordering::Relaxed),
            bytes: self.counters.bytes.load(Ordering::Relaxed),
        }
    }

    /// Whether the index of `path` is held.
    #[cfg(test)]
    pub(crate) fn holds(&self, path: &str) -> bool {
        self.lock().by_file.keys().any(|(p, _)| p == path)
    }

    /// Indexes held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().by_file.len()
    }

    fn get(&self, file: &(String, u64)) -> Option<Arc<FileIndex>> {
        self.lock().by_file.get(file).cloned()
    }

    fn insert(&self, file: (String, u64), index: Arc<FileIndex>) {
        let mut cached = self.lock();
        cached.bytes += index.bytes;
        if let Some(replaced) = cached.by_file.insert(file.clone(), index) {
            cached.bytes -= replaced.bytes;
        }
        // Any other entry will do: expired files' indexes go this way, and a live one evicted
        // is read again on its next lookup.
        while cached.bytes > self.capacity {
            let Some(evicted) = cached.by_file.keys().find(|f| **f != file).cloned() else {
                break;
            };
            if let Some(index) = cached.by_file.remove(&evicted) {
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
/// batch stream, its reads counted in `indexes`.
pub(crate) async fn open(
    file_io: &FileIO,
    indexes: &FileIndexes,
    path: &str,
    size: u64,
) -> Result<DataFileBytes> {
    let cannot_open = |e| lake_error(format!("cannot open the lake data file {path}"), e);
    let read = file_io
        .new_input(path)
        .map_err(cannot_open)?
        .reader()
        .await
        .map_err(cannot_open)?;
    Ok(DataFileBytes {
        read,
        size,
        counters: Arc::clone(&indexes.counters),
    })
}

/// The index of the data file at `path`, from `indexes`, or read from the file and kept there.
pub(crate) async fn index(
    file_io: &FileIO,
    indexes: &FileIndexes,
    path: &str,
    size: u64,
) -> Result<Arc<FileIndex>> {
    let file = (path.to_owned(), size);
    if let Some(index) = indexes.get(&file) {
        return Ok(index);
    }
    let mut bytes = open(file_io, indexes, path, size).await?;
    indexes.counters.indexes.fetch_add(1, Ordering::Relaxed);
    let index = Arc::new(FileIndex::read(&mut bytes, path).await?);
    indexes.insert(file, Arc::clone(&index));
    Ok(index)
}

/// An empty range reads nothing; a reversed one is an error.
fn empty_range(range: &Range<u64>) -> parquet::errors::Result<Bytes> {
    if range.start == range.end {
        Ok(Bytes::new())
    } else {
        Err(ParquetError::General(format!(
            "a damaged footer asks for bytes {range:?}"
        )))
    }
}

/// Ranges at most this far apart are read together.
const READ_GAP: u64 = 16 * 1024;

/// The reads that cover the non-empty `ranges`: sorted by start, with ranges at most `gap` apart
/// merged.
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
    counters: Arc<ReadCounters>,
}

impl AsyncFileReader for DataFileBytes {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        // A range from a damaged footer may be reversed; the file reader would underflow on it.
        if range.start >= range.end {
            let empty = empty_range(&range);
            return async move { empty }.boxed();
        }
        let counters = Arc::clone(&self.counters);
        self.read
            .read(range)
            .map(move |read| {
                let bytes = read.map_err(|e| ParquetError::External(Box::new(e)))?;
                counters.read(bytes.len());
                Ok(bytes)
            })
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
            // At once: on an object store each read is a request whose round trip dominates.
            let fetched: Vec<Bytes> = futures::future::try_join_all(reads.iter().map(|read| {
                let counters = &self.counters;
                self.read.read(read.clone()).map(move |bytes| {
                    let bytes = bytes.map_err(|e| ParquetError::External(Box::new(e)))?;
                    counters.read(bytes.len());
                    Ok::<_, ParquetError>(bytes)
                })
            }))
            .await?;
            ranges
                .iter()
                .map(|range| {
                    if range.start >= range.end {
                        return empty_range(range);
                    }
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
                    let within = |at: u64| {
                        at.checked_sub(read.start)
                            .and_then(|at| usize::try_from(at).ok())
                    };
                    match (within(range.start), within(range.end)) {
                        (Some(start), Some(end)) if start <= end && end <= bytes.len() => {
                            Ok(bytes.slice(start..end))
                        }
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
        use tidemark_engine_api::Record;

        let (_dir, lake, writer) =
            crate::testing::new_lake(crate::data_files::FileLayout::Indexed).await;
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
