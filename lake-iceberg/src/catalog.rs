//! A one-table catalog on a local directory: the table's current metadata file is named by a
//! pointer file that is replaced atomically, after every file the new metadata refers to is
//! synced. Replacing the pointer is the commit; a commit that fails before it leaves only
//! unreferenced files, and a restart reads the table as of the last pointer.
//!
//! Iceberg's own `MemoryCatalog` keeps the pointer in memory, so a restarted process could not
//! tell a committed metadata file from one written by a commit that failed half-way.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Runtime, TableCommit,
    TableCreation, TableIdent,
};
use tidemark_bucket::{Error, Result};

use crate::error::lake_error;

/// The pointer file, in the table's `metadata` directory.
const POINTER: &str = "tidemark-current";

/// The table's name in its catalog.
const NAMESPACE: &str = "tidemark";
const TABLE: &str = "lake";

/// The catalog of the one table at `dir`.
pub(crate) struct DirectoryCatalog {
    /// The table's location (its data and metadata directories are below it).
    dir: PathBuf,
    ident: TableIdent,
    file_io: FileIO,
    /// The last metadata read, by location, so a refresh that finds the pointer unchanged does
    /// not parse the metadata again.
    cached: Mutex<Option<(String, Arc<TableMetadata>)>>,
}

impl fmt::Debug for DirectoryCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectoryCatalog")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl DirectoryCatalog {
    /// The catalog of the table at `dir` (an absolute path), which may not exist yet.
    pub fn new(dir: PathBuf) -> Result<Self> {
        let ident = TableIdent::from_strs([NAMESPACE, TABLE])
            .map_err(|e| lake_error("cannot name the lake table", e))?;
        Ok(DirectoryCatalog {
            dir,
            ident,
            file_io: FileIO::new_with_fs(),
            cached: Mutex::new(None),
        })
    }

    /// The table's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn metadata_dir(&self) -> PathBuf {
        self.dir.join("metadata")
    }

    /// Whether a table has been committed at the directory.
    pub fn exists(&self) -> bool {
        self.metadata_dir().join(POINTER).is_file()
    }

    /// Creates the table with `creation`'s schema at the directory.
    pub async fn create(&self, creation: TableCreation) -> Result<Table> {
        if self.exists() {
            return Err(Error::invalid(format!(
                "a lake table already exists at {}",
                self.dir.display()
            )));
        }
        let metadata = TableMetadataBuilder::from_table_creation(creation)
            .and_then(TableMetadataBuilder::build)
            .map_err(|e| lake_error("cannot build the lake table's first metadata", e))?
            .metadata;
        let location = MetadataLocation::new_with_metadata(self.location(), &metadata);
        self.publish(location, metadata).await
    }

    /// The table's location as Iceberg records it.
    pub fn location(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }

    /// The table as of the pointer.
    pub async fn load(&self) -> Result<Table> {
        let location = self.pointer()?;
        match self.metadata_at(&location).await {
            Ok(metadata) => self.table(location, metadata),
            Err(first) => {
                // An expiry may have published a newer metadata file and deleted this one
                // between reading the pointer and the file: read the pointer again, once.
                let again = self.pointer()?;
                if again == location {
                    return Err(first);
                }
                let metadata = self.metadata_at(&again).await?;
                self.table(again, metadata)
            }
        }
    }

    /// The metadata location the pointer names.
    fn pointer(&self) -> Result<String> {
        let pointer = self.metadata_dir().join(POINTER);
        let location = std::fs::read_to_string(&pointer).map_err(|e| {
            lake_error(
                format!("cannot read the lake table's pointer {}", pointer.display()),
                e,
            )
        })?;
        Ok(location.trim().to_owned())
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
        let metadata = TableMetadata::read_from(&self.file_io, location)
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
            .file_io(self.file_io.clone())
            .metadata_location(location)
            .metadata(metadata)
            .identifier(self.ident.clone())
            .runtime(runtime)
            .build()
            .map_err(|e| lake_error("cannot open the lake table", e))
    }

    /// Commits `metadata` as the next version after `base`: writes and syncs the metadata file,
    /// then replaces the pointer. The caller has written and synced every data and manifest file
    /// the metadata refers to (see [`crate::durable`]).
    pub async fn commit(&self, base: &Table, metadata: TableMetadata) -> Result<Table> {
        let current = base
            .metadata_location()
            .ok_or_else(|| Error::lake("the lake table handle has no metadata location"))?;
        let location = MetadataLocation::from_str(current)
            .map_err(|e| lake_error("cannot parse the lake's metadata location", e))?
            .with_next_version()
            .with_new_metadata(&metadata);
        self.publish(location, metadata).await
    }

    async fn publish(&self, location: MetadataLocation, metadata: TableMetadata) -> Result<Table> {
        metadata
            .write_to(&self.file_io, &location)
            .await
            .map_err(|e| lake_error("cannot write lake metadata", e))?;
        let location = location.to_string();
        crate::durable::sync_file(&location)?;
        let dir = self.metadata_dir();
        tidemark_disk::layout::write_file_atomically(&dir, POINTER, location.as_bytes())
            .map_err(|e| lake_error("cannot replace the lake table's pointer", e))?;
        let metadata = Arc::new(metadata);
        *self.cached.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((location.clone(), Arc::clone(&metadata)));
        self.table(location, metadata)
    }
}

fn unsupported(what: &str) -> iceberg::Error {
    iceberg::Error::new(
        ErrorKind::FeatureUnsupported,
        format!("the Tidemark lake catalog holds one table and does not {what}"),
    )
}

fn to_iceberg(e: Error) -> iceberg::Error {
    iceberg::Error::new(ErrorKind::Unexpected, e.to_string())
}

/// Only what Iceberg's transactions use: loading the table and committing to it.
#[async_trait]
impl Catalog for DirectoryCatalog {
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
        if namespace == self.ident.namespace() && self.exists() {
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
        Ok(table == &self.ident && self.exists())
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
        let staged = commit.apply(current.clone())?;
        crate::durable::sync_new_files(staged.metadata(), current.metadata())
            .await
            .map_err(to_iceberg)?;
        let metadata = staged.metadata().clone();
        self.commit(&current, metadata).await.map_err(to_iceberg)
    }
}
