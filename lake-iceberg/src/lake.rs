//! [`IcebergLake`]: an Iceberg table on a local directory holding every bucket's tiered rows.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use iceberg::TableCreation;
use iceberg::table::Table;
use tidemark_bucket::{Error, LakeSnapshot, Result};

use crate::catalog::DirectoryCatalog;
use crate::data_file_reader::FileIndexes;
use crate::data_files::FileLayout;
use crate::error::lake_error;
use crate::rows;
use crate::snapshots;

/// The table's name in its own catalog and in its first metadata.
const TABLE_NAME: &str = "lake";

/// An Apache Iceberg table on a local directory that holds the tiered WAL records of many
/// buckets, as versioned rows `(bucket, key, offset, deleted, value)`.
///
/// Each commit is one snapshot whose summary property `fluss-offsets` records every bucket's
/// exclusive end offset. A bucket sees a snapshot as a [`LakeSnapshot`] whose id is the
/// snapshot's sequence number (ordered, unlike Iceberg's snapshot ids) and whose end offset is
/// its own entry.
///
/// Handles are cheap to clone and share the table. Commits of one handle and its clones run one
/// at a time, and so do expiry and compaction; commits go on while a compaction rewrites. One
/// process writes a table.
///
/// ```
/// use tidemark_engine_api::WriteBatch;
/// use tidemark_lake_iceberg::IcebergLake;
/// use tidemark_bucket::LakeLookuper;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let dir = tempfile::tempdir()?;
/// let lake = IcebergLake::open(dir.path()).await?;
/// let writer = lake.tiering_writer().await?;
/// let mut batch = WriteBatch::new();
/// batch.put("k", "v1", 0).put("k", "v2", 1).delete("gone", 2);
/// writer.append(7, batch.records().iter().cloned()).await?;
/// let commit = writer.commit(&[(7, 2)]).await?; // bucket 7, offsets below 2
///
/// let lookuper = lake.lookuper(7);
/// lookuper.refresh(commit.snapshot(7)).await?;
/// assert_eq!(lookuper.lookup(b"k").await?, Some(b"v2".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct IcebergLake {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    catalog: DirectoryCatalog,
    /// Commits, expiry and a compaction's own commit, one at a time.
    writes: tokio::sync::Mutex<()>,
    /// Expiry and compaction, one at a time: a compaction writes files before it commits, which
    /// an expiry's sweep of unreferenced files must not see.
    maintenance: tokio::sync::Mutex<()>,
    /// Data files' indexes, read once for every lookuper.
    file_indexes: FileIndexes,
    /// How this handle writes data files.
    layout: FileLayout,
}

// The lookuper, the tiering writer and the maintenance each add their entry points to the
// handle in their own module (`lookuper`, `writer`, `maintenance`): they build on it, and it
// needs none of them.
impl IcebergLake {
    /// Opens the table at `dir`, creating the directory and an empty table when there is none.
    pub async fn open(dir: impl AsRef<Path>) -> Result<IcebergLake> {
        IcebergLake::open_with_layout(dir.as_ref(), FileLayout::Indexed).await
    }

    /// Opens the table at `dir`, writing data files in `layout`.
    pub(crate) async fn open_with_layout(dir: &Path, layout: FileLayout) -> Result<IcebergLake> {
        std::fs::create_dir_all(dir.join("metadata"))
            .and_then(|()| std::fs::create_dir_all(dir.join("data")))
            .map_err(|e| lake_error(format!("cannot create {}", dir.display()), e))?;
        let dir: PathBuf = dir
            .canonicalize()
            .map_err(|e| lake_error(format!("cannot resolve {}", dir.display()), e))?;
        // A new table's directories must survive a crash as its first commit's files will.
        crate::durable::sync_path(&dir)?;
        if let Some(parent) = dir.parent() {
            crate::durable::sync_path(parent)?;
        }
        if dir.to_str().is_none() {
            return Err(Error::invalid(format!(
                "the lake directory {} is not valid UTF-8, which Iceberg locations must be",
                dir.display()
            )));
        }
        let catalog = DirectoryCatalog::new(dir)?;
        if !catalog.exists() {
            let creation = TableCreation::builder()
                .name(TABLE_NAME.to_owned())
                .location(catalog.location())
                .schema(rows::table_schema()?)
                .build();
            catalog.create(creation).await?;
        } else {
            // Fail at open, not at the first lookup, on a table that cannot be read.
            catalog.load().await?;
        }
        Ok(IcebergLake {
            inner: Arc::new(Inner {
                catalog,
                writes: tokio::sync::Mutex::new(()),
                maintenance: tokio::sync::Mutex::new(()),
                file_indexes: FileIndexes::default(),
                layout,
            }),
        })
    }

    /// The table's directory.
    pub fn dir(&self) -> &Path {
        self.inner.catalog.dir()
    }

    /// The table's current snapshot as `bucket` sees it (the empty lake before any commit): what
    /// a bucket recovers from after a restart or a leader change.
    pub async fn latest(&self, bucket: u64) -> Result<LakeSnapshot> {
        let table = self.table().await?;
        snapshots::latest(table.metadata(), bucket)
    }

    /// Every snapshot the table keeps, oldest commit first, as `bucket` sees it.
    pub async fn snapshots(&self, bucket: u64) -> Result<Vec<LakeSnapshot>> {
        let table = self.table().await?;
        snapshots::by_sequence(table.metadata())
            .iter()
            .map(|s| snapshots::for_bucket(s, bucket))
            .collect()
    }

    pub(crate) fn catalog(&self) -> &DirectoryCatalog {
        &self.inner.catalog
    }

    pub(crate) fn layout(&self) -> FileLayout {
        self.inner.layout
    }

    pub(crate) fn file_indexes(&self) -> &FileIndexes {
        &self.inner.file_indexes
    }

    /// The table as last committed.
    pub(crate) async fn table(&self) -> Result<Table> {
        self.inner.catalog.load().await
    }

    /// Holds off every other commit, expiry and compaction commit of this table until dropped.
    pub(crate) async fn lock_writes(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.writes.lock().await
    }

    /// Holds off every other expiry and compaction of this table until dropped (take it before
    /// [`lock_writes`](Self::lock_writes)).
    pub(crate) async fn lock_maintenance(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.maintenance.lock().await
    }
}
