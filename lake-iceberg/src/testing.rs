//! What the crate's unit tests share.

use std::sync::Arc;

use futures::TryStreamExt;
use iceberg::expr::Predicate;
use iceberg::scan::FileScanTask;
use iceberg::table::Table;

use crate::data_file_reader::{self, FileIndex};
use crate::lake::IcebergLake;

/// The data files Iceberg plans for a scan of the current snapshot with `filter` (all of them
/// without one).
pub(crate) async fn planned_files(table: &Table, filter: Option<Predicate>) -> Vec<FileScanTask> {
    let mut scan = table.scan();
    if let Some(filter) = filter {
        scan = scan.with_filter(filter);
    }
    scan.build()
        .unwrap()
        .plan_files()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// Every data file of the lake's current snapshot with its index (read and kept by the lake).
pub(crate) async fn indexed_files(lake: &IcebergLake) -> Vec<(FileScanTask, Arc<FileIndex>)> {
    let table = lake.table().await.unwrap();
    let mut files = Vec::new();
    for task in planned_files(&table, None).await {
        let index = data_file_reader::index(
            table.file_io(),
            lake.file_indexes(),
            &task.data_file_path,
            task.file_size_in_bytes,
        )
        .await
        .unwrap();
        files.push((task, index));
    }
    files
}
