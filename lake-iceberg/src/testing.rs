//! What the crate's unit tests share.

use std::sync::Arc;

use futures::TryStreamExt;
use iceberg::expr::Predicate;
use iceberg::scan::FileScanTask;
use iceberg::table::Table;

use crate::data_file_reader::{self, FileIndex};
use crate::data_files::FileLayout;
use crate::lake::IcebergLake;
use crate::writer::TieringWriter;

/// A new lake writing data files in `layout`, in a temporary directory (which must outlive it),
/// and its tiering writer.
pub(crate) async fn new_lake(
    layout: FileLayout,
) -> (tempfile::TempDir, IcebergLake, TieringWriter) {
    let dir = tempfile::tempdir().unwrap();
    let lake = IcebergLake::open_with_layout(&crate::LakeConfig::embedded(dir.path()), layout)
        .await
        .unwrap();
    let writer = lake.tiering_writer().await.unwrap();
    (dir, lake, writer)
}

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
