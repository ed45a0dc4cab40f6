//! What the crate's unit tests share.

use futures::TryStreamExt;
use iceberg::expr::Predicate;
use iceberg::scan::FileScanTask;
use iceberg::table::Table;

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
