//! [`IcebergLake`]: an Iceberg table holding every bucket's tiered rows, named in an Iceberg SQL
//! catalog ([`LakeConfig`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use iceberg::table::Table;
use iceberg::{TableCreation, TableIdent};
use tidemark_bucket::{Error, LakeSnapshot, Result};

use crate::catalog::LakeCatalog;
use crate::data_file_reader::{DataFileReads, FileIndexes};
use crate::data_files::FileLayout;
use crate::error::lake_error;
use crate::location::TableLocation;
use crate::rows;
use crate::snapshots;
use crate::sql_catalog::{CatalogUri, CommitLock, SqlCatalog};
use crate::warehouse::Warehouse;

/// The embedded catalog's file, in the table's directory.
pub const EMBEDDED_CATALOG_FILE: &str = "catalog.sqlite";

/// Where a lake table is and which catalog names it.
///
/// [`LakeConfig::embedded`] is the default: an SQLite catalog file inside the table's
/// directory, nothing to start. Several processes that write one table share a catalog server
/// instead, and usually an object store: [`LakeConfig::shared`] with a `postgres://` URI and
/// an `s3://bucket/prefix` location, whose settings [`storage`](Self::storage) holds.
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
    /// The table's location, holding its `data` and `metadata`: a local directory, or a prefix
    /// on an S3-protocol object store.
    pub location: TableLocation,
    /// An object store's settings, by Iceberg's file IO property names: `s3.endpoint`,
    /// `s3.region`, `s3.access-key-id`, `s3.secret-access-key`, `s3.session-token`,
    /// `s3.path-style-access`. Unset ones come from the standard environment variables
    /// (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`); the region defaults to `us-east-1`, and addressing is path-style
    /// when an endpoint is set. Unused for a local location.
    pub storage: BTreeMap<String, String>,
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

    /// The table at `location` (a local directory or `s3://bucket/prefix`), named
    /// `tidemark.lake` in the catalog at `catalog_uri`.
    pub fn shared(
        catalog_uri: impl Into<String>,
        location: impl Into<TableLocation>,
    ) -> LakeConfig {
        LakeConfig {
            catalog_uri: catalog_uri.into(),
            catalog_name: "tidemark".to_owned(),
            namespace: "tidemark".to_owned(),
            table: "lake".to_owned(),
            location: location.into(),
            storage: BTreeMap::new(),
        }
    }

    /// Sets the object store setting `key` (an Iceberg file IO property, `s3.endpoint` say).
    pub fn with_storage(mut self, key: impl Into<String>, value: impl Into<String>) -> LakeConfig {
        self.storage.insert(key.into(), value.into());
        self
    }
}

/// The table's write lock ([`IcebergLake::lock_writes`]). Dropped without
/// [`release`](Self::release) it still releases, at the cost of the catalog connection.
pub(crate) struct WriteLock<'a> {
    _local: tokio::sync::MutexGuard<'a, ()>,
    shared: CommitLock,
}

impl WriteLock<'_> {
    /// Releases the lock.
    pub(crate) async fn release(self) {
        self.shared.release().await;
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
        let warehouse = Warehouse::open(&config.location, &config.storage).await?;
        let uri: CatalogUri = config.catalog_uri.parse()?;
        let entry =
            SqlCatalog::connect(&uri, &config.catalog_name, &config.namespace, &config.table)
                .await?;
        let ident = TableIdent::from_strs([config.namespace.as_str(), config.table.as_str()])
            .map_err(|e| lake_error("cannot name the lake table", e))?;
        let catalog = LakeCatalog::new(warehouse, ident, entry);
        if !catalog.exists().await? {
            let creation = TableCreation::builder()
                .name(config.table.clone())
                .location(catalog.location())
                .schema(rows::table_schema()?)
                .build();
            catalog.create(creation).await?;
        } else {
            // Fail at open, not at the first lookup, on a table that cannot be read.
            let table = catalog.load().await?;
            // Expiry's sweep matches the files the table names against the configured
            // location's listing: a table recorded elsewhere (another spelling of it, or another
            // prefix) would have every file it names taken for an orphan.
            let recorded = table.metadata().location().trim_end_matches('/');
            let configured = catalog.location();
            let same = match catalog.warehouse().local_dir() {
                Some(dir) => crate::location::local_path(recorded) == dir,
                None => recorded == configured,
            };
            if !same {
                return Err(Error::invalid(format!(
                    "the catalog's table {}.{} is at {recorded}, not at the configured location \
                     {configured}: open it with the location it was created with",
                    config.namespace, config.table
                )));
            }
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

    /// The table's directory, for a table on a local directory.
    pub fn dir(&self) -> Option<&Path> {
        self.inner.catalog.warehouse().local_dir()
    }

    /// The table's location as Iceberg records it (an absolute path, or `s3://bucket/prefix`).
    pub fn location(&self) -> &str {
        self.inner.catalog.warehouse().location()
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

    /// What this handle's lookups have read from data files so far (requests, on an object
    /// store), indexes included.
    pub fn data_file_reads(&self) -> DataFileReads {
        self.inner.file_indexes.reads()
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

    pub(crate) fn warehouse(&self) -> &Warehouse {
        self.inner.catalog.warehouse()
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

    /// Holds off every other commit, expiry and compaction commit of this table until
    /// [released](WriteLock::release): this handle's and, through the catalog's commit lock,
    /// those of Tidemark's writers in other processes.
    pub(crate) async fn lock_writes(&self) -> Result<WriteLock<'_>> {
        let local = self.inner.writes.lock().await;
        let shared = self.inner.catalog.lock_commits().await?;
        Ok(WriteLock {
            _local: local,
            shared,
        })
    }

    /// Holds off this handle's other commits, expiries and compaction commits until dropped
    /// (not those of other processes).
    pub(crate) async fn lock_local_writes(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.writes.lock().await
    }

    /// Holds off every other expiry and compaction of this table until dropped (take it before
    /// [`lock_writes`](Self::lock_writes)).
    pub(crate) async fn lock_maintenance(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.maintenance.lock().await
    }
}
