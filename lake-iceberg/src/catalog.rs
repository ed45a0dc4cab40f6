//! The lake table's catalog: the table's entry in an Iceberg SQL catalog
//! ([`crate::sql_catalog`]) names its current metadata file, and a commit writes and syncs the
//! next metadata file, then swaps the entry from the metadata it read to the new one. A commit
//! that loses the swap to another writer changes nothing (its metadata file is deleted) and
//! says so; one that fails before the swap leaves only unreferenced files; a restart reads the
//! table as of the entry.
//!
//! Tables written before the SQL catalog named their metadata in a pointer file,
//! `metadata/tidemark-current`; opening one registers that metadata in the catalog once and
//! removes the pointer, so no second, stale name for the table remains.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Runtime, TableCommit,
    TableCreation, TableIdent,
};
use tidemark_bucket::{Error, Result};

use crate::error::lake_error;
use crate::sql_catalog::{CommitLock, SqlCatalog};
use crate::warehouse::Warehouse;

/// The pointer file of tables written before the SQL catalog, in the `metadata` directory.
const LEGACY_POINTER: &str = "tidemark-current";

/// The catalog entry of the one lake table in `warehouse`.
pub(crate) struct LakeCatalog {
    /// Where the table's files are (its data and metadata directories are below it).
    warehouse: Warehouse,
    ident: TableIdent,
    entry: SqlCatalog,
    /// The last metadata read, by location, so a refresh that finds the entry unchanged does
    /// not parse the metadata again.
    cached: Mutex<Option<(String, Arc<TableMetadata>)>>,
    /// Whether reads of the entry fail, as an unreachable catalog's do.
    #[cfg(feature = "testing")]
    failing: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for LakeCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LakeCatalog")
            .field("warehouse", &self.warehouse)
            .field("ident", &self.ident)
            .finish_non_exhaustive()
    }
}

/// What a commit came to.
pub(crate) enum Commit {
    /// The table as the commit left it.
    Done(Box<Table>),
    /// Another writer committed since the base was read: nothing changed; reload and retry.
    Lost,
}

impl LakeCatalog {
    /// The catalog entry `ident` of `entry`'s catalog for the table in `warehouse`, which may
    /// not exist yet.
    pub fn new(warehouse: Warehouse, ident: TableIdent, entry: SqlCatalog) -> Self {
        LakeCatalog {
            warehouse,
            ident,
            entry,
            cached: Mutex::new(None),
            #[cfg(feature = "testing")]
            failing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Makes reads of the table's entry fail (or work again), as an unreachable catalog's do.
    #[cfg(feature = "testing")]
    pub fn fail(&self, failing: bool) {
        self.failing
            .store(failing, std::sync::atomic::Ordering::SeqCst);
    }

    /// Takes the table's commit lock, shared with the table's writers in other processes
    /// ([`SqlCatalog::lock_commits`]).
    pub async fn lock_commits(&self) -> Result<CommitLock> {
        self.entry.lock_commits().await
    }

    /// Where the table's files are.
    pub fn warehouse(&self) -> &Warehouse {
        &self.warehouse
    }

    /// The table's catalog entry, registering a pointer-file table's metadata first (see the
    /// module docs). `None` while no table has been committed.
    async fn current(&self) -> Result<Option<String>> {
        #[cfg(feature = "testing")]
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::lake(
                "the lake catalog cannot be reached (a test's failure)",
            ));
        }
        if let Some(location) = self.entry.current().await? {
            return Ok(Some(location));
        }
        // Only local tables had pointers.
        let Some(dir) = self.warehouse.local_dir() else {
            return Ok(None);
        };
        let metadata_dir = dir.join("metadata");
        let pointer = metadata_dir.join(LEGACY_POINTER);
        let legacy = match std::fs::read_to_string(&pointer) {
            Ok(location) => location.trim().to_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(lake_error(
                    format!("cannot read the lake table's pointer {}", pointer.display()),
                    e,
                ));
            }
        };
        // Registered only once it reads: a damaged pointer must not become the catalog's entry.
        self.metadata_at(&legacy).await?;
        // Another handle may register it at the same time: whichever entry landed is the table.
        self.entry.create(&legacy).await?;
        std::fs::remove_file(&pointer)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
            .map_err(|e| lake_error(format!("cannot remove {}", pointer.display()), e))?;
        crate::warehouse::sync_path(&metadata_dir)?;
        self.entry.current().await
    }

    /// Whether a table has been committed.
    pub async fn exists(&self) -> Result<bool> {
        Ok(self.current().await?.is_some())
    }

    /// Creates the table with `creation`'s schema at the directory; when another writer
    /// created it first, returns that table instead.
    pub async fn create(&self, creation: TableCreation) -> Result<Table> {
        let metadata = TableMetadataBuilder::from_table_creation(creation)
            .and_then(TableMetadataBuilder::build)
            .map_err(|e| lake_error("cannot build the lake table's first metadata", e))?
            .metadata;
        let location = MetadataLocation::new_with_metadata(self.location(), &metadata);
        let location = self.write_metadata(&location, &metadata).await?;
        if self.entry.create(&location).await? {
            return self.table(location, Arc::new(metadata));
        }
        self.discard(&location).await;
        self.load().await
    }

    /// The table's location as Iceberg records it.
    pub fn location(&self) -> String {
        self.warehouse.location().to_owned()
    }

    /// The table as of its catalog entry.
    pub async fn load(&self) -> Result<Table> {
        let location = self.current().await?.ok_or_else(|| {
            Error::lake(format!(
                "the lake catalog has no table {} for {}",
                self.ident,
                self.warehouse.location()
            ))
        })?;
        match self.metadata_at(&location).await {
            Ok(metadata) => self.table(location, metadata),
            Err(first) => {
                // An expiry may have committed a newer metadata file and deleted this one
                // between reading the entry and the file: read the entry again, once.
                let again = self.current().await?;
                match again {
                    Some(again) if again != location => {
                        let metadata = self.metadata_at(&again).await?;
                        self.table(again, metadata)
                    }
                    _ => Err(first),
                }
            }
        }
    }

    /// The metadata at `location`, parsed once per location.
    async fn metadata_at(&self, location: &str) -> Result<Arc<TableMetadata>> {
        let cached = self
            .cached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some((at, metadata)) = cached
            && at == location
        {
            return Ok(metadata);
        }
        let metadata = TableMetadata::read_from(self.warehouse.file_io(), location)
            .await
            .map_err(|e| lake_error(format!("cannot read lake metadata {location}"), e))?;
        let metadata = Arc::new(metadata);
        *self.cached.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((location.to_owned(), Arc::clone(&metadata)));
        Ok(metadata)
    }

    fn table(&self, location: String, metadata: Arc<TableMetadata>) -> Result<Table> {
        // The runtime of the caller: a table handle never outlives the call that loaded it
        // for long, and the lake may be used from more than one runtime.
        let runtime = Runtime::try_current()
            .map_err(|e| lake_error("the Iceberg lake needs a tokio runtime", e))?;
        Table::builder()
            .file_io(self.warehouse.file_io().clone())
            .metadata_location(location)
            .metadata(metadata)
            .identifier(self.ident.clone())
            .runtime(runtime)
            .build()
            .map_err(|e| lake_error("cannot open the lake table", e))
    }

    /// Commits `metadata` as the next version after `base`: writes and syncs the metadata file,
    /// then swaps the catalog entry from `base`'s metadata to it. The caller has written and
    /// synced every data and manifest file the metadata refers to (see [`crate::durable`]).
    pub async fn commit(&self, base: &Table, metadata: TableMetadata) -> Result<Commit> {
        let current = base
            .metadata_location()
            .ok_or_else(|| Error::lake("the lake table handle has no metadata location"))?;
        let location = MetadataLocation::from_str(current)
            .map_err(|e| lake_error("cannot parse the lake's metadata location", e))?
            .with_next_version()
            .with_new_metadata(&metadata);
        let location = self.write_metadata(&location, &metadata).await?;
        let swapped = match self.entry.swap(current, &location).await {
            Ok(swapped) => swapped,
            // The statement failed, but the server may have applied it (a connection lost
            // around its commit): the entry says which.
            Err(e) => match self.entry.current().await {
                Ok(Some(now)) if now == location => true,
                Ok(Some(now)) if now == current => return Err(e),
                _ => {
                    return Err(Error::lake(format!(
                        "a lake commit's outcome is unknown (its catalog statement failed: {e}); \
                         reopen the tiering writer to read the table as it is"
                    )));
                }
            },
        };
        if !swapped {
            self.discard(&location).await;
            return Ok(Commit::Lost);
        }
        let metadata = Arc::new(metadata);
        *self.cached.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((location.clone(), Arc::clone(&metadata)));
        self.table(location, metadata)
            .map(|table| Commit::Done(Box::new(table)))
    }

    /// Writes and syncs `metadata` at `location`; returns the location as the catalog names it.
    async fn write_metadata(
        &self,
        location: &MetadataLocation,
        metadata: &TableMetadata,
    ) -> Result<String> {
        metadata
            .write_to(self.warehouse.file_io(), location)
            .await
            .map_err(|e| lake_error("cannot write lake metadata", e))?;
        let location = location.to_string();
        self.warehouse.sync(&location)?;
        Ok(location)
    }

    /// Removes the metadata file of a commit that lost: no entry ever named it. Best effort:
    /// an expiry's sweep of old unreferenced files removes what is left.
    async fn discard(&self, location: &str) {
        let _ = self.warehouse.delete(location).await;
    }
}

fn unsupported(what: &str) -> iceberg::Error {
    iceberg::Error::new(
        ErrorKind::FeatureUnsupported,
        format!("the Tidemark lake catalog serves one table and does not {what}"),
    )
}

fn to_iceberg(e: Error) -> iceberg::Error {
    iceberg::Error::new(ErrorKind::Unexpected, e.to_string())
}

/// Only what Iceberg's transactions use: loading the table and committing to it.
#[async_trait]
impl Catalog for LakeCatalog {
    async fn list_namespaces(
        &self,
        _parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        Ok(vec![self.ident.namespace().clone()])
    }

    async fn create_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        Err(unsupported("create namespaces"))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        if namespace == self.ident.namespace() {
            return Ok(Namespace::new(namespace.clone()));
        }
        Err(unsupported("hold other namespaces"))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        Ok(namespace == self.ident.namespace())
    }

    async fn update_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        Err(unsupported("update namespaces"))
    }

    async fn drop_namespace(&self, _namespace: &NamespaceIdent) -> iceberg::Result<()> {
        Err(unsupported("drop namespaces"))
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        if namespace == self.ident.namespace() && self.exists().await.map_err(to_iceberg)? {
            return Ok(vec![self.ident.clone()]);
        }
        Ok(Vec::new())
    }

    async fn create_table(
        &self,
        _namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        self.create(creation).await.map_err(to_iceberg)
    }

    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        if table != &self.ident {
            return Err(unsupported("hold other tables"));
        }
        self.load().await.map_err(to_iceberg)
    }

    async fn drop_table(&self, _table: &TableIdent) -> iceberg::Result<()> {
        Err(unsupported("drop tables"))
    }

    async fn purge_table(&self, _table: &TableIdent) -> iceberg::Result<()> {
        Err(unsupported("purge tables"))
    }

    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        Ok(table == &self.ident && self.exists().await.map_err(to_iceberg)?)
    }

    async fn rename_table(&self, _src: &TableIdent, _dest: &TableIdent) -> iceberg::Result<()> {
        Err(unsupported("rename tables"))
    }

    async fn register_table(
        &self,
        _table: &TableIdent,
        _metadata_location: String,
    ) -> iceberg::Result<Table> {
        Err(unsupported("register tables"))
    }

    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        let current = self.load().await.map_err(to_iceberg)?;
        // A requirement the table no longer meets (its `main` moved) is a lost race too, and
        // not for Iceberg's transaction to retry: see the conflict below.
        let staged = commit.apply(current.clone()).map_err(|e| {
            if e.kind() == ErrorKind::CatalogCommitConflicts {
                iceberg::Error::new(ErrorKind::CatalogCommitConflicts, e.message().to_owned())
            } else {
                e
            }
        })?;
        crate::durable::sync_new_files(&self.warehouse, staged.metadata(), current.metadata())
            .await
            .map_err(to_iceberg)?;
        let metadata = staged.metadata().clone();
        match self.commit(&current, metadata).await.map_err(to_iceberg)? {
            Commit::Done(table) => Ok(*table),
            // Not retryable within Iceberg's transaction: the lake's writers recompute what
            // they commit (the merged bucket ends) from the table that won, so they retry
            // themselves ([`crate::retry`]).
            Commit::Lost => Err(iceberg::Error::new(
                ErrorKind::CatalogCommitConflicts,
                format!(
                    "another writer committed to the lake table {} first",
                    self.ident
                ),
            )),
        }
    }
}

/// The catalog as one commit of the lake sees it: the table loads as `base`, the table the
/// commit was planned on, so Iceberg's transaction builds its updates (and its requirement that
/// `main` is still `base`'s) on it rather than on a newer table it would reload; committing goes
/// to the catalog. A writer that lost reloads and plans again, with what the winner committed
/// (the merged bucket ends), which a transaction re-applied as it was could not do.
pub(crate) struct Pinned<'a> {
    catalog: &'a LakeCatalog,
    base: Table,
}

impl fmt::Debug for Pinned<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pinned")
            .field("catalog", self.catalog)
            .field("base", &self.base.metadata_location())
            .finish()
    }
}

impl LakeCatalog {
    /// The catalog for a commit planned on `base` (see [`Pinned`]).
    pub(crate) fn pinned(&self, base: &Table) -> Pinned<'_> {
        Pinned {
            catalog: self,
            base: base.clone(),
        }
    }
}

#[async_trait]
impl Catalog for Pinned<'_> {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.catalog.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        self.catalog.create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.catalog.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.catalog.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        self.catalog.update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.catalog.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.catalog.list_tables(namespace).await
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        self.catalog.create_table(namespace, creation).await
    }

    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        if table != &self.catalog.ident {
            return Err(unsupported("hold other tables"));
        }
        Ok(self.base.clone())
    }

    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.catalog.drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.catalog.purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        self.catalog.table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.catalog.rename_table(src, dest).await
    }

    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<Table> {
        self.catalog.register_table(table, metadata_location).await
    }

    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        self.catalog.update_table(commit).await
    }
}
