//! [`IcebergLake`]: an Iceberg table holding every bucket's tiered rows, named in an Iceberg SQL
//! catalog ([`LakeConfig`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use iceberg::table::Table;
use iceberg::{TableCreation, TableIdent};
use tidemark_bucket::{Error, LakeSnapshot, Result};

use crate::catalog::LakeCatalog;
use crate::data_file_reader::FileIndexes;
use crate::data_files::FileLayout;
use crate::error::lake_error;
use crate::rows;
use crate::snapshots;
use crate::sql_catalog::{CatalogUri, SqlCatalog};

/// The embedded catalog's file, in the table's directory.
pub const EMBEDDED_CATALOG_FILE: &str = "catalog.sqlite";

/// Where a lake table is and which catalog names it.
///
/// [`LakeConfig::embedded`] is the default: an SQLite catalog file inside the table's
/// directory, nothing to start. Several processes that write one table share a catalog server
/// instead: [`LakeConfig::shared`] with a `postgres://` URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeConfig {
    /// The catalog: `sqlite://<path>` (an embedded file, created when missing) or
    /// `postgres://user:password@host:port/database`.
    pub catalog_uri: String,
    /// The catalog's name, the SQL catalog's `catalog_name` column (readers such as pyiceberg
    /// and Spark name the catalog the same to find the table).
    pub catalog_name: String,
    /// The table's namespace in the catalog.
    pub namespace: String,
    /// The table's name in the catalog.
    pub table: String,
    /// The table's location: a local directory holding its `data` and `metadata`.
    pub location: PathBuf,
}

impl LakeConfig {
    /// The table at `dir`, named `tidemark.lake` in an SQLite catalog file
    /// ([`EMBEDDED_CATALOG_FILE`]) in the same directory.
    pub fn embedded(dir: impl AsRef<Path>) -> LakeConfig {
        let dir = dir.as_ref();
        LakeConfig::shared(
            format!("sqlite://{}", dir.join(EMBEDDED_CATALOG_FILE).display()),
            dir,
        )
    }

    /// The table at `location`, named `tidemark.lake` in the catalog at `catalog_uri`.
    pub fn shared(catalog_uri: impl Into<String>, location: impl AsRef<Path>) -> LakeConfig {
        LakeConfig {
            catalog_uri: catalog_uri.into(),
            catalog_name: "tidemark".to_owned(),
            namespace: "tidemark".to_owned(),
            table: "lake".to_owned(),
            location: location.as_ref().to_path_buf(),
        }
    }
}

/// An Apache Iceberg table that holds the tiered WAL records of many buckets, as versioned rows
/// `(bucket, key, offset, deleted, value)`, named in an Iceberg SQL catalog ([`LakeConfig`]).
///
/// Each commit is one snapshot whose summary property `fluss-offsets` records every bucket's
/// exclusive end offset. A bucket sees a snapshot as a [`LakeSnapshot`] whose id is the
/// snapshot's sequence number (ordered, unlike Iceberg's snapshot ids) and whose end offset is
/// its own entry.
///
/// Handles are cheap to clone and share the table. Commits of one handle and its clones run one
/// at a time, and so do expiry and compaction; commits go on while a compaction rewrites.
/// Handles in several processes may write one table through a shared catalog, each tiering
/// writer its own buckets: every commit is a compare-and-swap of the catalog's entry, and one
/// that loses reloads the table, merges the winner's bucket ends and retries.
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
    catalog: LakeCatalog,
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
    /// Opens the table at `dir` with its embedded catalog ([`LakeConfig::embedded`]), creating
    /// the directory and an empty table when there is none.
    pub async fn open(dir: impl AsRef<Path>) -> Result<IcebergLake> {
        IcebergLake::open_with(&LakeConfig::embedded(dir)).await
    }

    /// Opens the table `config` names, creating its directory and an empty table when the
    /// catalog has none.
    pub async fn open_with(config: &LakeConfig) -> Result<IcebergLake> {
        IcebergLake::open_with_layout(config, FileLayout::Indexed).await
    }

    /// Opens the table `config` names, writing data files in `layout`.
    pub(crate) async fn open_with_layout(
        config: &LakeConfig,
        layout: FileLayout,
    ) -> Result<IcebergLake> {
        let dir = config.location.as_path();
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
        let uri: CatalogUri = config.catalog_uri.parse()?;
        let entry =
            SqlCatalog::connect(&uri, &config.catalog_name, &config.namespace, &config.table)
                .await?;
        let ident = TableIdent::from_strs([config.namespace.as_str(), config.table.as_str()])
            .map_err(|e| lake_error("cannot name the lake table", e))?;
        let catalog = LakeCatalog::new(dir, ident, entry);
        if !catalog.exists().await? {
            let creation = TableCreation::builder()
                .name(config.table.clone())
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

    /// The location of the table's current metadata file, as its catalog names it: what
    /// another engine registers to read the table from a catalog of its own.
    pub async fn metadata_location(&self) -> Result<String> {
        let table = self.table().await?;
        table
            .metadata_location()
            .map(str::to_owned)
            .ok_or_else(|| Error::lake("the lake table handle has no metadata location"))
    }

    /// Test hook: makes this handle's reads of the catalog fail (or work again), as they do
    /// when the catalog cannot be reached.
    #[cfg(feature = "testing")]
    pub fn fail_catalog(&self, failing: bool) {
        self.inner.catalog.fail(failing);
    }

    pub(crate) fn catalog(&self) -> &LakeCatalog {
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
