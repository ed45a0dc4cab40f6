//! Reading the versions of a set of keys from one data file, touching only the pages that may
//! hold them: a row group is read for the keys its bounds and its key bloom filter admit, and
//! within it only the pages whose key bounds hold one of those keys.
//!
//! Iceberg's own reader prunes row groups by their bounds alone and evaluates a scan filter term
//! by term on every row it decodes: a batch of 100 keys spread over the key space decoded every
//! row group, and a key whose versions live in another file still read a page of each file whose
//! bounds span it.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array as _, BooleanArray, RecordBatch};
use arrow_schema::ArrowError;
use arrow_select::filter::filter_record_batch;
use futures::TryStreamExt;
use iceberg::io::FileIO;
use iceberg::scan::FileScanTask;
use iceberg::spec::DataFileFormat;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::statistics::Statistics;
use tidemark_bucket::{Error, Result};

use crate::data_file_reader::{self, FileIndex, FileIndexes};
use crate::error::lake_error;
use crate::rows::{self, BUCKET, KEY, Row};

/// The keys of one bucket a lookup asks for.
#[derive(Debug, Clone)]
pub(crate) struct WantedKeys {
    bucket: i64,
    /// Sorted, without duplicates.
    keys: Arc<Vec<Vec<u8>>>,
}

impl WantedKeys {
    pub(crate) fn new(bucket: u64, keys: &[Vec<u8>]) -> WantedKeys {
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        WantedKeys {
            bucket: rows::to_i64(bucket),
            keys: Arc::new(keys),
        }
    }

    fn holds(&self, bucket: i64, key: &[u8]) -> bool {
        bucket == self.bucket
            && self
                .keys
                .binary_search_by(|k| k.as_slice().cmp(key))
                .is_ok()
    }

    /// Whether a row group whose statistics are these may hold this bucket's rows. Bounds that
    /// are missing or not exact never rule a group out.
    fn bucket_may_be_in(&self, group: &RowGroupMetaData, bucket_column: usize) -> bool {
        match group.column(bucket_column).statistics() {
            Some(Statistics::Int64(s)) if s.min_is_exact() && s.max_is_exact() => {
                match (s.min_opt(), s.max_opt()) {
                    (Some(lowest), Some(highest)) => (*lowest..=*highest).contains(&self.bucket),
                    _ => true,
                }
            }
            _ => true,
        }
    }

    /// Which rows of a batch with `bucket` and `key` columns hold one of the keys.
    fn select(&self, batch: &RecordBatch) -> std::result::Result<BooleanArray, ArrowError> {
        let column = |name: &str| {
            batch.column_by_name(name).ok_or_else(|| {
                ArrowError::SchemaError(format!("a lake data file has no `{name}` column"))
            })
        };
        let buckets = column(BUCKET)?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| ArrowError::SchemaError("`bucket` is not a long".to_owned()))?;
        let keys = column(KEY)?
            .as_binary_opt::<i64>()
            .ok_or_else(|| ArrowError::SchemaError("`key` is not binary".to_owned()))?;
        Ok((0..batch.num_rows())
            .map(|i| Some(keys.is_valid(i) && self.holds(buckets.value(i), keys.value(i))))
            .collect())
    }
}

/// The keys of `keys` (sorted) a row group may hold, by its key bounds and bloom filter. Bounds
/// that are missing or not exact rule nothing out.
fn keys_in_group<'k>(
    keys: &'k [Vec<u8>],
    index: &FileIndex,
    group: usize,
    metadata: &RowGroupMetaData,
) -> Vec<&'k [u8]> {
    let mut candidates: &[Vec<u8>] = keys;
    if let Some(Statistics::ByteArray(s)) = metadata.column(index.key_column).statistics()
        && s.min_is_exact()
        && s.max_is_exact()
        && let (Some(lowest), Some(highest)) = (s.min_bytes_opt(), s.max_bytes_opt())
        // Bounds out of order are damaged: they rule nothing out.
        && lowest <= highest
    {
        let first = keys.partition_point(|k| k.as_slice() < lowest);
        let end = keys.partition_point(|k| k.as_slice() <= highest);
        candidates = keys.get(first..end).unwrap_or_default();
    }
    let filter = index.key_filters.get(group).and_then(Option::as_ref);
    candidates
        .iter()
        .map(Vec::as_slice)
        .filter(|k| filter.is_none_or(|f| f.check(*k)))
        .collect()
}

/// The rows of `group` (`rows` long) to read, as runs of selected and skipped rows: the key
/// pages whose bounds hold one of `keys` (sorted). `None` when the page index does not describe
/// the group's key pages; every row is then read.
fn pages_of(
    index: &FileIndex,
    group: usize,
    rows: usize,
    keys: &[&[u8]],
) -> Option<Vec<RowSelector>> {
    let footer = index.footer.metadata();
    let ColumnIndexMetaData::BYTE_ARRAY(bounds) =
        footer.column_index()?.get(group)?.get(index.key_column)?
    else {
        return None;
    };
    let pages = footer
        .offset_index()?
        .get(group)?
        .get(index.key_column)?
        .page_locations();
    if u64::try_from(pages.len()).ok()? != bounds.num_pages() || pages.first()?.first_row_index != 0
    {
        return None;
    }
    let mut runs = Vec::with_capacity(pages.len());
    for (page, location) in pages.iter().enumerate() {
        let first = usize::try_from(location.first_row_index).ok()?;
        let end = match pages.get(page + 1) {
            Some(next) => usize::try_from(next.first_row_index).ok()?,
            None => rows,
        };
        let len = end.checked_sub(first)?;
        let read = match (bounds.min_value(page), bounds.max_value(page)) {
            (Some(lowest), Some(highest)) if lowest <= highest => {
                let first_not_below = keys.partition_point(|k| *k < lowest);
                keys.get(first_not_below).is_some_and(|k| *k <= highest)
            }
            // A page with no bounds (all null, or not recorded) or damaged ones is read.
            _ => true,
        };
        runs.push(if read {
            RowSelector::select(len)
        } else {
            RowSelector::skip(len)
        });
    }
    Some(runs)
}

/// The row groups of a file to read for the wanted keys, and the runs of their rows to read
/// and skip (in group order).
fn plan_reads(index: &FileIndex, wanted: &WantedKeys) -> Result<(Vec<usize>, Vec<RowSelector>)> {
    let mut groups = Vec::new();
    let mut runs = Vec::new();
    for (i, group) in index.footer.metadata().row_groups().iter().enumerate() {
        if !wanted.bucket_may_be_in(group, index.bucket_column) {
            continue;
        }
        let keys = keys_in_group(&wanted.keys, index, i, group);
        if keys.is_empty() {
            continue;
        }
        // Row counts were checked when the index was read: none is negative.
        let rows = usize::try_from(group.num_rows()).map_err(|_| {
            Error::lake(format!(
                "row group {i} of a lake data file claims {} rows",
                group.num_rows()
            ))
        })?;
        let pages =
            pages_of(index, i, rows, &keys).unwrap_or_else(|| vec![RowSelector::select(rows)]);
        if pages.iter().any(|run| !run.skip && run.row_count > 0) {
            groups.push(i);
            runs.extend(pages);
        }
    }
    Ok((groups, runs))
}

/// Every version of the wanted keys in the data file of `task` (no other rows).
pub(crate) async fn versions(
    file_io: &FileIO,
    indexes: &FileIndexes,
    task: &FileScanTask,
    wanted: &WantedKeys,
) -> Result<Vec<Row>> {
    let path = task.data_file_path.as_str();
    // Iceberg-rust cannot commit delete files, and the tiering writer never does; a table that
    // has them was written by something else, and answering without applying them would be wrong.
    if !task.deletes.is_empty() {
        return Err(Error::lake(format!(
            "the lake data file {path} has delete files, which Tidemark's lookuper does not apply"
        )));
    }
    if task.data_file_format != DataFileFormat::Parquet {
        return Err(Error::lake(format!(
            "the lake data file {path} is not Parquet"
        )));
    }
    let size = task.file_size_in_bytes;
    let index = data_file_reader::index(file_io, indexes, path, size).await?;
    let (groups, runs) = plan_reads(&index, wanted)?;
    if groups.is_empty() {
        // The file is not opened: its index rules every key out.
        return Ok(Vec::new());
    }
    let bytes = data_file_reader::open(file_io, indexes, path, size).await?;
    let cannot_read = |e| lake_error(format!("cannot read the lake data file {path}"), e);
    let batches: Vec<RecordBatch> =
        ParquetRecordBatchStreamBuilder::new_with_metadata(bytes, index.footer.clone())
            .with_row_groups(groups)
            .with_row_selection(RowSelection::from(runs))
            .build()
            .map_err(cannot_read)?
            .try_collect()
            .await
            .map_err(cannot_read)?;
    let mut versions = Vec::new();
    for batch in &batches {
        // The selected pages hold other keys' rows too.
        let rows_of_keys = wanted
            .select(batch)
            .and_then(|selected| filter_record_batch(batch, &selected))
            .map_err(|e| lake_error(format!("cannot read the lake data file {path}"), e))?;
        versions.extend(rows::from_batch(&rows_of_keys)?);
    }
    Ok(versions)
}

#[cfg(test)]
mod tests {
    use tidemark_engine_api::Record;

    use tidemark_bucket::{LakeLookuper, LakeSnapshot};

    use super::*;
    use crate::data_files::{FileLayout, PAGE_ROWS, ROW_GROUP_ROWS};
    use crate::lake::IcebergLake;

    const KEYS: u64 = 5_000;

    /// Bucket 1's keys; bucket 2's sort after them.
    fn key(i: u64) -> Vec<u8> {
        format!("k-{i:05}").into_bytes()
    }

    fn key_of_2(i: u64) -> Vec<u8> {
        format!("m-{i:05}").into_bytes()
    }

    /// One commit of 5,000 keys each for buckets 1 and 2: one data file of three row groups,
    /// bucket 1's rows first. Returns the lake's directory (which must outlive it), the lake and
    /// the file's index.
    async fn one_file() -> (tempfile::TempDir, IcebergLake, Arc<FileIndex>) {
        let (dir, lake, writer) = crate::testing::new_lake(FileLayout::Indexed).await;
        let records = (0..KEYS).map(|i| Record::put(key(i), "v", i));
        writer.append(1, records).await.unwrap();
        let records = (0..KEYS).map(|i| Record::put(key_of_2(i), "v", i));
        writer.append(2, records).await.unwrap();
        writer.commit(&[(1, KEYS), (2, KEYS)]).await.unwrap();
        let mut files = crate::testing::indexed_files(&lake).await;
        assert_eq!(files.len(), 1);
        let (_, index) = files.remove(0);
        assert_eq!(index.footer.metadata().num_row_groups(), 3);
        assert!(index.key_filters.iter().all(Option::is_some));
        (dir, lake, index)
    }

    fn plan(index: &FileIndex, wanted: &WantedKeys) -> (Vec<usize>, Vec<RowSelector>) {
        plan_reads(index, wanted).unwrap()
    }

    fn rows_read(runs: &[RowSelector]) -> usize {
        runs.iter().filter(|r| !r.skip).map(|r| r.row_count).sum()
    }

    #[tokio::test]
    async fn a_key_reads_one_page_of_the_row_groups_of_its_bucket() {
        let (_dir, _lake, index) = one_file().await;
        let (groups, runs) = plan(&index, &WantedKeys::new(1, &[key(100)]));
        assert_eq!(groups, vec![0]);
        assert_eq!(rows_read(&runs), PAGE_ROWS);
        let described: usize = runs.iter().map(|r| r.row_count).sum();
        assert_eq!(described, ROW_GROUP_ROWS, "the runs cover the group");
        // Bucket 1's last keys share the second row group with bucket 2's first keys; the third
        // holds only bucket 2 and is skipped by its bucket bounds.
        let (groups, runs) = plan(&index, &WantedKeys::new(1, &[key(4_900)]));
        assert_eq!((groups, rows_read(&runs)), (vec![1], PAGE_ROWS));
        let (groups, _) = plan(&index, &WantedKeys::new(2, &[key_of_2(4_900)]));
        assert_eq!(groups, vec![2]);
        // The bloom filters are of keys alone: a key of bucket 1 that bucket 2 holds reads
        // bucket 2's page too, whose rows the bucket check then drops.
        let (groups, _) = plan(&index, &WantedKeys::new(1, &[key_of_2(100)]));
        assert_eq!(groups, vec![1]);
        let (groups, _) = plan(&index, &WantedKeys::new(3, &[key(100)]));
        assert!(groups.is_empty(), "no row group holds bucket 3");
    }

    #[tokio::test]
    async fn a_batch_reads_the_pages_of_its_keys_not_its_key_range() {
        let (_dir, _lake, index) = one_file().await;
        // Ten keys spread over bucket 1: ten pages, in both of its row groups.
        let spread: Vec<Vec<u8>> = (0..10).map(|i| key(i * 490)).collect();
        let (groups, runs) = plan(&index, &WantedKeys::new(1, &spread));
        assert_eq!(groups, vec![0, 1]);
        assert_eq!(rows_read(&runs), 10 * PAGE_ROWS);
    }

    #[tokio::test]
    async fn keys_within_the_bounds_but_not_in_the_file_are_skipped_by_the_bloom_filter() {
        let (_dir, _lake, index) = one_file().await;
        // 200 absent keys between present ones: every one lies within a page's bounds, and
        // the filters (1 % false positives) admit a few at most.
        let absent: Vec<Vec<u8>> = (0..200)
            .map(|i| format!("k-{:05}x", i * 20).into_bytes())
            .collect();
        let (_, runs) = plan(&index, &WantedKeys::new(1, &absent));
        assert!(
            rows_read(&runs) <= 10 * PAGE_ROWS,
            "{} rows read for 200 absent keys",
            rows_read(&runs)
        );
    }

    /// A file whose index rules a key out is not opened: once its index is kept, such keys are
    /// answered even when the file can no longer be read, and a key it may hold is an error.
    #[tokio::test]
    async fn a_key_the_index_rules_out_does_not_open_the_file() {
        let (dir, lake, _index) = one_file().await;
        let lookuper = lake.lookuper(1);
        lookuper
            .refresh(lake.latest(1).await.unwrap())
            .await
            .unwrap();
        assert_eq!(lookuper.lookup(&key(7)).await.unwrap(), Some(b"v".to_vec()));
        let data = dir.path().join("data");
        for entry in std::fs::read_dir(&data).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        let absent = b"k-00007x".to_vec();
        assert_eq!(lookuper.lookup(&absent).await.unwrap(), None);
        assert!(lookuper.lookup(&key(7)).await.is_err());
    }

    /// Every key at the edge of a page or a row group of any data file (its first and last key,
    /// and the keys just past them), with a sample of others.
    async fn edge_keys(lake: &IcebergLake) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        for (_, index) in crate::testing::indexed_files(lake).await {
            let footer = index.footer.metadata();
            for (g, group) in footer.row_groups().iter().enumerate() {
                if let Some(s) = group.column(index.key_column).statistics() {
                    keys.extend(s.min_bytes_opt().map(<[u8]>::to_vec));
                    keys.extend(s.max_bytes_opt().map(<[u8]>::to_vec));
                }
                let pages = footer
                    .column_index()
                    .and_then(|c| c.get(g))
                    .and_then(|c| c.get(index.key_column));
                if let Some(ColumnIndexMetaData::BYTE_ARRAY(bounds)) = pages {
                    for page in 0..usize::try_from(bounds.num_pages()).unwrap() {
                        keys.extend(bounds.min_value(page).map(<[u8]>::to_vec));
                        keys.extend(bounds.max_value(page).map(<[u8]>::to_vec));
                    }
                }
            }
        }
        let past: Vec<Vec<u8>> = keys
            .iter()
            .map(|k| {
                let mut k = k.clone();
                k.push(0);
                k
            })
            .collect();
        keys.extend(past);
        keys.extend(
            (0..600)
                .step_by(7)
                .map(|i| format!("key-{i:04}").into_bytes()),
        );
        keys.sort();
        keys.dedup();
        keys
    }

    /// Three buckets' versions of overlapping keys over three commits and a compaction, in
    /// `layout`: at every snapshot each bucket answers its model for every key at a page's or a
    /// row group's edge, one by one and in batches.
    async fn answers_the_model_at_every_edge(layout: FileLayout) {
        use std::collections::BTreeMap;

        type Versions = BTreeMap<Vec<u8>, Vec<(u64, Option<Vec<u8>>)>>;
        let (_dir, lake, writer) = crate::testing::new_lake(layout).await;
        let mut models = [Versions::new(), Versions::new(), Versions::new()];
        let mut ends = [0u64; 3];
        let mut snapshots: Vec<Vec<LakeSnapshot>> = vec![Vec::new(); 3];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..3 {
            for (b, model) in models.iter_mut().enumerate() {
                let records: Vec<Record> = (0..3_000)
                    .map(|_| {
                        let key = format!("key-{:04}", next() % 600).into_bytes();
                        let offset = ends[b];
                        ends[b] += 1;
                        let value = (next() % 4 != 0).then(|| format!("{b}@{offset}").into_bytes());
                        model
                            .entry(key.clone())
                            .or_default()
                            .push((offset, value.clone()));
                        match value {
                            Some(v) => Record::put(key, v, offset),
                            None => Record::delete(key, offset),
                        }
                    })
                    .collect();
                writer.append(b as u64, records).await.unwrap();
            }
            let commit: Vec<(u64, u64)> = (0..3).map(|b| (b as u64, ends[b])).collect();
            let committed = writer.commit(&commit).await.unwrap();
            for (b, snapshots) in snapshots.iter_mut().enumerate() {
                snapshots.push(committed.snapshot(b as u64));
            }
        }
        let tiered_edges = edge_keys(&lake).await;
        let compacted = lake.compact().await.unwrap().unwrap();
        for (snapshots, end) in snapshots.iter_mut().zip(ends) {
            snapshots.push(LakeSnapshot::new(compacted, end));
        }
        let mut keys = edge_keys(&lake).await;
        keys.extend(tiered_edges);
        keys.sort();
        keys.dedup();
        if layout == FileLayout::Plain {
            for (_, index) in crate::testing::indexed_files(&lake).await {
                assert!(index.key_filters.iter().all(Option::is_none));
                let key_pages = |g: &Vec<ColumnIndexMetaData>| {
                    matches!(
                        g.get(index.key_column),
                        None | Some(ColumnIndexMetaData::NONE)
                    )
                };
                assert!(
                    index
                        .footer
                        .metadata()
                        .column_index()
                        .is_none_or(|c| c.iter().all(key_pages)),
                    "no key page bounds"
                );
            }
        }

        for (b, model) in models.iter().enumerate() {
            let lookuper = lake.lookuper(b as u64);
            for snapshot in &snapshots[b] {
                lookuper.refresh(*snapshot).await.unwrap();
                let want: Vec<Option<Vec<u8>>> = keys
                    .iter()
                    .map(|k| {
                        model
                            .get(k)
                            .and_then(|v| v.iter().rev().find(|(o, _)| *o < snapshot.end_offset))
                            .and_then(|(_, v)| v.clone())
                    })
                    .collect();
                assert!(want.iter().any(Option::is_some) && want.iter().any(Option::is_none));
                for (batch, want) in keys.chunks(100).zip(want.chunks(100)) {
                    assert_eq!(
                        lookuper.lookup_many(batch).await.unwrap(),
                        want,
                        "{layout:?}"
                    );
                }
                for (key, want) in keys.iter().zip(&want) {
                    assert_eq!(
                        &lookuper.lookup(key).await.unwrap(),
                        want,
                        "{layout:?}, bucket {b} at {snapshot:?}, key {}",
                        String::from_utf8_lossy(key)
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn indexed_files_answer_the_model_at_every_page_and_row_group_edge() {
        answers_the_model_at_every_edge(FileLayout::Indexed).await;
    }

    /// Files without a page index or bloom filters (another writer's) are read by whole row
    /// groups, and answer the same.
    #[tokio::test]
    async fn plain_files_answer_the_model_at_every_row_group_edge() {
        answers_the_model_at_every_edge(FileLayout::Plain).await;
    }

    /// A damaged bloom filter is not used (its groups are judged by their bounds), and a file
    /// whose footer cannot be read fails the lookups that need it, without a panic.
    #[tokio::test]
    async fn damaged_filters_are_ignored_and_damaged_footers_are_errors() {
        use std::io::{Seek, SeekFrom, Write};

        let (dir, lake, index) = one_file().await;
        let snapshot = lake.latest(1).await.unwrap();
        let table = lake.table().await.unwrap();
        let task = crate::testing::planned_files(&table, None).await.remove(0);
        let path = crate::location::local_path(&task.data_file_path);
        let chunk = index
            .footer
            .metadata()
            .row_group(0)
            .column(index.key_column);
        let (offset, length) = (
            chunk.bloom_filter_offset().unwrap(),
            chunk.bloom_filter_length().unwrap(),
        );
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(u64::try_from(offset).unwrap()))
            .unwrap();
        file.write_all(&vec![0xff; usize::try_from(length).unwrap()])
            .unwrap();
        drop(file);

        // A new handle: nothing of the file is kept yet.
        let reopened = IcebergLake::open(dir.path()).await.unwrap();
        let damaged = reopened.lookuper(1);
        damaged.refresh(snapshot).await.unwrap();
        let keys: Vec<Vec<u8>> = (0..ROW_GROUP_ROWS as u64).step_by(41).map(key).collect();
        let values = damaged.lookup_many(&keys).await.unwrap();
        assert!(values.iter().all(|v| v.as_deref() == Some(b"v".as_slice())));
        let (_, kept) = crate::testing::indexed_files(&reopened).await.remove(0);
        assert!(
            kept.key_filters[0].is_none(),
            "the damaged filter is not used"
        );
        assert!(kept.key_filters[1].is_some());

        // The footer's last bytes (its length and magic) overwritten.
        let size = std::fs::metadata(&path).unwrap().len();
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(size - 8)).unwrap();
        file.write_all(&[0xff; 8]).unwrap();
        drop(file);
        let reopened = IcebergLake::open(dir.path()).await.unwrap();
        let lookuper = reopened.lookuper(1);
        lookuper.refresh(snapshot).await.unwrap();
        assert!(lookuper.lookup(&key(7)).await.is_err());
        assert!(lookuper.lookup_many(&keys).await.is_err());
    }
}
