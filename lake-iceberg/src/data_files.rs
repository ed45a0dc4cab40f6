//! Writing rows into Parquet data files of the table, sorted by (bucket, key, offset) and cut
//! into small row groups, so a lookup's filter skips whole files and row groups by their key
//! bounds.

use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use tidemark_bucket::Result;

use crate::durable;
use crate::error::lake_error;
use crate::rows::{self, Row};

/// Rows per Parquet row group: small enough that a point lookup reads a fraction of a large
/// file, large enough that the per-group statistics stay a small part of it.
pub(crate) const ROW_GROUP_ROWS: usize = 4096;

/// The key bloom filters' false-positive rate: about 10 bits a key.
const KEY_FILTER_FPP: f64 = 0.01;

/// Rows per data page. With each file's offset index, a lookup fetches and decodes the value
/// pages of the rows it selected, not the row group's whole value column.
pub(crate) const PAGE_ROWS: usize = 128;

/// Writes `rows` (sorted) as new data files of `table` and syncs them. `purpose` names the files
/// (`tier` or `compact`), so an operator can tell them apart.
pub(crate) async fn write(table: &Table, rows: &[Row], purpose: &str) -> Result<Vec<DataFile>> {
    let metadata = table.metadata();
    let schema = metadata.current_schema().clone();
    let batch = rows::to_batch(&schema, rows)?;
    let locations = DefaultLocationGenerator::new(metadata)
        .map_err(|e| lake_error("cannot place the lake's data files", e))?;
    // File names restart their counter with every writer: a fresh UUID keeps them unique across
    // commits and restarts.
    let names = DefaultFileNameGenerator::new(
        purpose.to_owned(),
        Some(uuid::Uuid::now_v7().to_string()),
        DataFileFormat::Parquet,
    );
    // Statistics are kept whole: Parquet cuts them at 64 bytes by default and marks a cut bound
    // inexact, and Iceberg leaves inexact bounds out when it sums a file's row groups into the
    // file's key bounds, which then no longer hold every key and would let a lookup skip the file
    // holding its newest version.
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_data_page_row_count_limit(PAGE_ROWS)
        .set_write_batch_size(PAGE_ROWS)
        // Keys and values are mostly distinct: a dictionary only adds a page to decode.
        .set_column_dictionary_enabled(ColumnPath::from(rows::KEY), false)
        .set_column_dictionary_enabled(ColumnPath::from(rows::VALUE), false)
        // A key bloom filter per row group: a lookup skips the groups (and files) whose key
        // bounds span its key but which do not hold it, as a tiered file's mostly do.
        .set_column_bloom_filter_enabled(ColumnPath::from(rows::KEY), true)
        .set_column_bloom_filter_ndv(ColumnPath::from(rows::KEY), ROW_GROUP_ROWS as u64)
        .set_column_bloom_filter_fpp(ColumnPath::from(rows::KEY), KEY_FILTER_FPP)
        .set_statistics_truncate_length(None)
        .set_column_index_truncate_length(None)
        .build();
    let parquet = ParquetWriterBuilder::new(properties, schema);
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        parquet,
        table.file_io().clone(),
        locations,
        names,
    );
    let mut writer = DataFileWriterBuilder::new(rolling)
        .build(None)
        .await
        .map_err(|e| lake_error("cannot start a lake data file", e))?;
    writer
        .write(batch)
        .await
        .map_err(|e| lake_error("cannot write a lake data file", e))?;
    let files = writer
        .close()
        .await
        .map_err(|e| lake_error("cannot finish a lake data file", e))?;
    for file in &files {
        durable::sync_file(file.file_path())?;
    }
    Ok(files)
}
