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
    if let Some(s) = metadata.column(index.key_column).statistics()
        && s.min_is_exact()
        && s.max_is_exact()
        && let (Some(lowest), Some(highest)) = (s.min_bytes_opt(), s.max_bytes_opt())
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
            (Some(lowest), Some(highest)) => {
                let first_not_below = keys.partition_point(|k| *k < lowest);
                keys.get(first_not_below).is_some_and(|k| *k <= highest)
            }
            // A page with no bounds (all null, or not recorded) is read.
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
fn plan_reads(index: &FileIndex, wanted: &WantedKeys) -> (Vec<usize>, Vec<RowSelector>) {
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
        let rows = usize::try_from(group.num_rows()).unwrap_or(0);
        let pages =
            pages_of(index, i, rows, &keys).unwrap_or_else(|| vec![RowSelector::select(rows)]);
        if pages.iter().any(|run| !run.skip && run.row_count > 0) {
            groups.push(i);
            runs.extend(pages);
        }
    }
    (groups, runs)
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
    let (groups, runs) = plan_reads(&index, wanted);
    if groups.is_empty() {
        // The file is not opened: its index rules every key out.
        return Ok(Vec::new());
    }
    let bytes = data_file_reader::open(file_io, path, size).await?;
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
    use engine_api::batch::Record;

    use super::*;
    use crate::data_files::{PAGE_ROWS, ROW_GROUP_ROWS};
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
    /// bucket 1's rows first. Returns the lake (whose directory must outlive it) and the file's
    /// index.
    async fn one_file(dir: &std::path::Path) -> (IcebergLake, Arc<FileIndex>) {
        let lake = IcebergLake::open(dir).await.unwrap();
        let writer = lake.tiering_writer().await.unwrap();
        let records = (0..KEYS).map(|i| Record::put(key(i), "v", i));
        writer.append(1, records).await.unwrap();
        let records = (0..KEYS).map(|i| Record::put(key_of_2(i), "v", i));
        writer.append(2, records).await.unwrap();
        writer.commit(&[(1, KEYS), (2, KEYS)]).await.unwrap();
        let table = lake.table().await.unwrap();
        let tasks = crate::testing::planned_files(&table, None).await;
        assert_eq!(tasks.len(), 1);
        let task = &tasks[0];
        let index = data_file_reader::index(
            table.file_io(),
            lake.file_indexes(),
            &task.data_file_path,
            task.file_size_in_bytes,
        )
        .await
        .unwrap();
        assert_eq!(index.footer.metadata().num_row_groups(), 3);
        assert!(index.key_filters.iter().all(Option::is_some));
        (lake, index)
    }

    fn rows_read(runs: &[RowSelector]) -> usize {
        runs.iter().filter(|r| !r.skip).map(|r| r.row_count).sum()
    }

    #[tokio::test]
    async fn a_key_reads_one_page_of_the_row_groups_of_its_bucket() {
        let dir = tempfile::tempdir().unwrap();
        let (_lake, index) = one_file(dir.path()).await;
        let (groups, runs) = plan_reads(&index, &WantedKeys::new(1, &[key(100)]));
        assert_eq!(groups, vec![0]);
        assert_eq!(rows_read(&runs), PAGE_ROWS);
        let described: usize = runs.iter().map(|r| r.row_count).sum();
        assert_eq!(described, ROW_GROUP_ROWS, "the runs cover the group");
        // Bucket 1's last keys share the second row group with bucket 2's first keys; the third
        // holds only bucket 2 and is skipped by its bucket bounds.
        let (groups, runs) = plan_reads(&index, &WantedKeys::new(1, &[key(4_900)]));
        assert_eq!((groups, rows_read(&runs)), (vec![1], PAGE_ROWS));
        let (groups, _) = plan_reads(&index, &WantedKeys::new(2, &[key_of_2(4_900)]));
        assert_eq!(groups, vec![2]);
        // The bloom filters are of keys alone: a key of bucket 1 that bucket 2 holds reads
        // bucket 2's page too, whose rows the bucket check then drops.
        let (groups, _) = plan_reads(&index, &WantedKeys::new(1, &[key_of_2(100)]));
        assert_eq!(groups, vec![1]);
        let (groups, _) = plan_reads(&index, &WantedKeys::new(3, &[key(100)]));
        assert!(groups.is_empty(), "no row group holds bucket 3");
    }

    #[tokio::test]
    async fn a_batch_reads_the_pages_of_its_keys_not_its_key_range() {
        let dir = tempfile::tempdir().unwrap();
        let (_lake, index) = one_file(dir.path()).await;
        // Ten keys spread over bucket 1: ten pages, in both of its row groups.
        let spread: Vec<Vec<u8>> = (0..10).map(|i| key(i * 490)).collect();
        let (groups, runs) = plan_reads(&index, &WantedKeys::new(1, &spread));
        assert_eq!(groups, vec![0, 1]);
        assert_eq!(rows_read(&runs), 10 * PAGE_ROWS);
    }

    #[tokio::test]
    async fn keys_within_the_bounds_but_not_in_the_file_are_skipped_by_the_bloom_filter() {
        let dir = tempfile::tempdir().unwrap();
        let (_lake, index) = one_file(dir.path()).await;
        // 200 absent keys between present ones: every one lies within a page's bounds, and
        // the filters (1 % false positives) admit a few at most.
        let absent: Vec<Vec<u8>> = (0..200)
            .map(|i| format!("k-{:05}x", i * 20).into_bytes())
            .collect();
        let (_, runs) = plan_reads(&index, &WantedKeys::new(1, &absent));
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
        use tidemark_bucket::LakeLookuper;

        let dir = tempfile::tempdir().unwrap();
        let (lake, _index) = one_file(dir.path()).await;
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
}
