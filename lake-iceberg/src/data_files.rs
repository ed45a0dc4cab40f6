//! Writing rows into Parquet data files of the table, sorted by (bucket, key, offset), cut into
//! small row groups and pages, with a page index and key bloom filters, so a lookup skips the
//! files, row groups and pages that cannot hold its keys.

use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use tidemark_bucket::Result;

use crate::error::lake_error;
use crate::rows::{self, Row};

/// Rows per Parquet row group: small enough that a point lookup reads a fraction of a large
/// file, large enough that the per-group statistics stay a small part of it.
pub(crate) const ROW_GROUP_ROWS: usize = 4096;

/// The key bloom filters' false-positive rate. Parquet rounds a filter up to a power of two: for
/// a 4,096-row group, 8 KiB, 16 bits a key.
const KEY_FILTER_FPP: f64 = 0.01;

/// Rows per data page. With each file's offset index, a lookup fetches and decodes the value
/// pages of the rows it selected, not the row group's whole value column.
pub(crate) const PAGE_ROWS: usize = 128;

/// How data files are cut and indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileLayout {
    /// Small pages with a page index, key bloom filters: what the lookuper reads least of.
    Indexed,
    /// Row groups and whole statistics only, Parquet's defaults otherwise (one large page per
    /// column chunk, dictionaries, no page index or bloom filters): what a table written by
    /// another writer may hold, where lookups must fall back to reading whole row groups.
    #[cfg(test)]
    Plain,
}

impl FileLayout {
    fn properties(self) -> WriterProperties {
        // Statistics are kept whole: Parquet cuts them at 64 bytes by default and marks a cut
        // bound inexact, and Iceberg leaves inexact bounds out when it sums a file's row groups
        // into the file's key bounds, which then no longer hold every key and would let a lookup
        // skip the file holding its newest version.
        let whole = WriterProperties::builder()
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_statistics_truncate_length(None)
            .set_column_index_truncate_length(None);
        let key = || ColumnPath::from(rows::KEY);
        let value = || ColumnPath::from(rows::VALUE);
        match self {
            FileLayout::Indexed => whole
                .set_data_page_row_count_limit(PAGE_ROWS)
                .set_write_batch_size(PAGE_ROWS)
                // Keys and values are mostly distinct: a dictionary only adds a page to decode.
                .set_column_dictionary_enabled(key(), false)
                .set_column_dictionary_enabled(value(), false)
                // Nothing filters on values; whole value bounds for every page would make the
                // footer grow with the values.
                .set_column_statistics_enabled(value(), EnabledStatistics::None)
                // A key bloom filter per row group: a lookup skips the groups (and files) whose
                // key bounds span its key but which do not hold it, as a tiered file's mostly do.
                .set_column_bloom_filter_enabled(key(), true)
                .set_column_bloom_filter_ndv(key(), ROW_GROUP_ROWS as u64)
                .set_column_bloom_filter_fpp(key(), KEY_FILTER_FPP)
                .build(),
            #[cfg(test)]
            FileLayout::Plain => whole
                .set_statistics_enabled(EnabledStatistics::Chunk)
                .build(),
        }
    }
}

/// Writes `rows` (sorted) as new data files of `table` in `layout`, not yet synced (a commit
/// through the catalog syncs what it adds; a compaction syncs its own). `purpose` names
/// the files (`tier` or `compact`), so an operator can tell them apart.
pub(crate) async fn write(
    table: &Table,
    rows: &[Row],
    purpose: &str,
    layout: FileLayout,
) -> Result<Vec<DataFile>> {
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
    let properties = layout.properties();
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
    Ok(files)
}
