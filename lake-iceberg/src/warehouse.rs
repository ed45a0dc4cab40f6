//! The table's files where they are kept: a local directory, or a prefix on an S3-protocol
//! object store. Everything the lake does to files beyond Iceberg's reads and writes goes
//! through here: syncing a file before a commit names it (local only: an object is durable
//! once its PUT returns), deleting, and listing the table's files for expiry's sweep.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use iceberg::io::{
    FileIO, FileIOBuilder, S3_ACCESS_KEY_ID, S3_ENDPOINT, S3_PATH_STYLE_ACCESS, S3_REGION,
    S3_SECRET_ACCESS_KEY, S3_SESSION_TOKEN,
};
use iceberg_storage_opendal::OpenDalStorageFactory;
use tidemark_bucket::{Error, Result};

use crate::error::lake_error;
use crate::location::{TableLocation, local_path};

/// The region an object store is addressed in when neither the configuration nor the
/// environment names one (S3-protocol servers other than AWS accept any).
const DEFAULT_REGION: &str = "us-east-1";

/// A table file as [`Warehouse::table_files`] lists it.
pub(crate) struct TableFile {
    /// Its key ([`Warehouse::key`]).
    pub key: String,
    /// When it was last written, when the store says.
    pub modified: Option<SystemTime>,
}

/// Where the table's files are kept, with the file IO Iceberg reads and writes them through.
pub(crate) struct Warehouse {
    /// The table's location as Iceberg records it.
    location: String,
    file_io: FileIO,
    store: Store,
}

enum Store {
    /// An absolute, canonical directory.
    Local(PathBuf),
    /// An object store, rooted at the table's prefix.
    Object(opendal::Operator),
}

impl fmt::Debug for Warehouse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Warehouse")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Warehouse {
    /// The warehouse at `location`; a local one's directories are created (and synced) when
    /// missing. `storage` holds an object store's settings (Iceberg's file IO property names),
    /// completed from the standard environment variables.
    pub async fn open(
        location: &TableLocation,
        storage: &BTreeMap<String, String>,
    ) -> Result<Warehouse> {
        match location {
            TableLocation::Local(dir) => Warehouse::local(dir),
            TableLocation::ObjectStore(url) => Warehouse::object(url, storage),
        }
    }

    fn local(dir: &Path) -> Result<Warehouse> {
        std::fs::create_dir_all(dir.join("metadata"))
            .and_then(|()| std::fs::create_dir_all(dir.join("data")))
            .map_err(|e| lake_error(format!("cannot create {}", dir.display()), e))?;
        let dir: PathBuf = dir
            .canonicalize()
            .map_err(|e| lake_error(format!("cannot resolve {}", dir.display()), e))?;
        // A new table's directories must survive a crash as its first commit's files will.
        sync_path(&dir)?;
        if let Some(parent) = dir.parent() {
            sync_path(parent)?;
        }
        let Some(location) = dir.to_str().map(str::to_owned) else {
            return Err(Error::invalid(format!(
                "the lake directory {} is not valid UTF-8, which Iceberg locations must be",
                dir.display()
            )));
        };
        Ok(Warehouse {
            location,
            file_io: FileIO::new_with_fs(),
            store: Store::Local(dir),
        })
    }

    fn object(url: &str, storage: &BTreeMap<String, String>) -> Result<Warehouse> {
        let (bucket, prefix) = split_url(url)?;
        let props = object_store_properties(storage, |name| std::env::var(name).ok());
        let file_io = FileIOBuilder::new(Arc::new(OpenDalStorageFactory::S3 {
            customized_credential_load: None,
        }))
        .with_props(props.iter().map(|(k, v)| (k.clone(), v.clone())))
        .build();
        let mut builder = opendal::services::S3::default()
            .bucket(bucket)
            .root(&format!("/{prefix}"));
        if let Some(endpoint) = props.get(S3_ENDPOINT) {
            builder = builder.endpoint(endpoint);
        }
        if let Some(region) = props.get(S3_REGION) {
            builder = builder.region(region);
        }
        if let Some(key) = props.get(S3_ACCESS_KEY_ID) {
            builder = builder.access_key_id(key);
        }
        if let Some(secret) = props.get(S3_SECRET_ACCESS_KEY) {
            builder = builder.secret_access_key(secret);
        }
        if let Some(token) = props.get(S3_SESSION_TOKEN) {
            builder = builder.session_token(token);
        }
        if !props
            .get(S3_PATH_STYLE_ACCESS)
            .is_some_and(|v| is_truthy(v))
        {
            builder = builder.enable_virtual_host_style();
        }
        // Retried as Iceberg's own S3 storage retries: a request on a pooled connection the
        // server just closed fails once, temporarily.
        let operator = opendal::Operator::new(builder)
            .map_err(|e| lake_error(format!("cannot address the object store at {url}"), e))?
            .layer(opendal::layers::RetryLayer::new())
            .finish();
        Ok(Warehouse {
            location: format!("s3://{bucket}/{prefix}"),
            file_io,
            store: Store::Object(operator),
        })
    }

    /// The table's location as Iceberg records it.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The file IO Iceberg reads and writes the table's files through.
    pub fn file_io(&self) -> &FileIO {
        &self.file_io
    }

    /// The table's directory, for a local warehouse.
    pub fn local_dir(&self) -> Option<&Path> {
        match &self.store {
            Store::Local(dir) => Some(dir),
            Store::Object(_) => None,
        }
    }

    /// How the table's file at `location` is known in [`table_files`](Self::table_files)'
    /// listing: a local file by its path (Iceberg may name it by path or `file:` URL), an
    /// object by its URL.
    pub fn key(&self, location: &str) -> String {
        match &self.store {
            Store::Local(_) => local_path(location).to_string_lossy().into_owned(),
            Store::Object(_) => location.to_owned(),
        }
    }

    /// Makes the file at `location` (and its name) survive a crash: a local file is synced
    /// with its directory; an object already is.
    pub fn sync(&self, location: &str) -> Result<()> {
        match &self.store {
            Store::Local(_) => {
                let path = local_path(location);
                sync_path(&path)?;
                match path.parent() {
                    Some(dir) => sync_path(dir),
                    None => Ok(()),
                }
            }
            Store::Object(_) => Ok(()),
        }
    }

    /// Deletes the file at `location`; one already gone is not an error.
    pub async fn delete(&self, location: &str) -> Result<()> {
        match &self.store {
            Store::Local(_) => {
                let path = local_path(location);
                match std::fs::remove_file(&path) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(lake_error(format!("cannot delete {}", path.display()), e)),
                }
            }
            // Deleting a missing object succeeds.
            Store::Object(_) => self
                .file_io
                .delete(location)
                .await
                .map_err(|e| lake_error(format!("cannot delete {location}"), e)),
        }
    }

    /// The table's data, manifest, manifest-list and metadata files under its `data` and
    /// `metadata` prefixes (whatever else is there, a local catalog's file say, is left out).
    pub async fn table_files(&self) -> Result<Vec<TableFile>> {
        let mut files = Vec::new();
        match &self.store {
            Store::Local(dir) => {
                for sub in [dir.join("data"), dir.join("metadata")] {
                    let entries = std::fs::read_dir(&sub)
                        .map_err(|e| lake_error(format!("cannot list {}", sub.display()), e))?;
                    for entry in entries {
                        let entry = entry
                            .map_err(|e| lake_error(format!("cannot list {}", sub.display()), e))?;
                        let path = entry.path();
                        if !is_table_file(&entry.file_name().to_string_lossy()) {
                            continue;
                        }
                        let modified = entry.metadata().and_then(|m| m.modified()).ok();
                        files.push(TableFile {
                            key: path.to_string_lossy().into_owned(),
                            modified,
                        });
                    }
                }
            }
            Store::Object(operator) => {
                for sub in ["data/", "metadata/"] {
                    let entries = operator.list_with(sub).recursive(true).await.map_err(|e| {
                        lake_error(format!("cannot list {}/{sub}", self.location), e)
                    })?;
                    for entry in entries {
                        if !entry.metadata().is_file() || !is_table_file(entry.name()) {
                            continue;
                        }
                        files.push(TableFile {
                            key: format!("{}/{}", self.location, entry.path()),
                            modified: entry.metadata().last_modified().map(SystemTime::from),
                        });
                    }
                }
            }
        }
        Ok(files)
    }
}

/// Whether a property value means yes, as Iceberg's S3 file IO reads it.
fn is_truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "true" | "t" | "1" | "on"
    )
}

/// Whether a file name is one of a table's own files.
fn is_table_file(name: &str) -> bool {
    name.ends_with(".parquet") || name.ends_with(".avro") || name.ends_with(".metadata.json")
}

/// Syncs the file or directory at `path` (a directory: the entries created in it).
pub(crate) fn sync_path(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| lake_error(format!("cannot sync {}", path.display()), e))
}

/// `s3://bucket/prefix` as its bucket and prefix (without slashes at its ends).
fn split_url(url: &str) -> Result<(&str, &str)> {
    let rest = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .ok_or_else(|| Error::invalid(format!("{url} is not an s3:// location")))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = prefix.trim_matches('/');
    if bucket.is_empty() || prefix.is_empty() {
        return Err(Error::invalid(format!(
            "the lake location {url} needs a bucket and a prefix: s3://bucket/prefix"
        )));
    }
    Ok((bucket, prefix))
}

/// The object store's settings: `configured` (Iceberg's file IO property names), completed
/// from the standard environment variables `env` reads: `AWS_ENDPOINT_URL_S3` or
/// `AWS_ENDPOINT_URL`, `AWS_REGION` or `AWS_DEFAULT_REGION` (else `us-east-1`),
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`. Addressing is path-style
/// when an endpoint is set (as S3-protocol servers other than AWS expect) unless
/// `s3.path-style-access` says otherwise, and virtual-host style (Iceberg's default) without.
fn object_store_properties(
    configured: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> HashMap<String, String> {
    let mut props: HashMap<String, String> = configured
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let from_env = |props: &mut HashMap<String, String>, key: &str, names: &[&str]| {
        if props.contains_key(key) {
            return;
        }
        if let Some(value) = names.iter().find_map(|name| env(name)) {
            props.insert(key.to_owned(), value);
        }
    };
    from_env(
        &mut props,
        S3_ENDPOINT,
        &["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"],
    );
    from_env(&mut props, S3_REGION, &["AWS_REGION", "AWS_DEFAULT_REGION"]);
    from_env(&mut props, S3_ACCESS_KEY_ID, &["AWS_ACCESS_KEY_ID"]);
    from_env(&mut props, S3_SECRET_ACCESS_KEY, &["AWS_SECRET_ACCESS_KEY"]);
    from_env(&mut props, S3_SESSION_TOKEN, &["AWS_SESSION_TOKEN"]);
    props
        .entry(S3_REGION.to_owned())
        .or_insert_with(|| DEFAULT_REGION.to_owned());
    let path_style = props.contains_key(S3_ENDPOINT);
    let style = props
        .entry(S3_PATH_STYLE_ACCESS.to_owned())
        .or_insert_with(|| path_style.to_string());
    *style = style.trim().to_ascii_lowercase();
    props
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_need_a_bucket_and_a_prefix() {
        assert_eq!(split_url("s3://b/p/q/").unwrap(), ("b", "p/q"));
        assert!(split_url("s3://b").is_err());
        assert!(split_url("s3://b/").is_err());
        assert!(split_url("s3:///p").is_err());
        assert!(split_url("b/p").is_err());
    }

    #[test]
    fn configuration_wins_over_the_environment_which_fills_the_rest() {
        let env = |name: &str| match name {
            "AWS_ENDPOINT_URL" => Some("http://127.0.0.1:9000".to_owned()),
            "AWS_DEFAULT_REGION" => Some("eu-west-1".to_owned()),
            "AWS_ACCESS_KEY_ID" => Some("from-env".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("secret".to_owned()),
            _ => None,
        };
        let configured = BTreeMap::from([(S3_ACCESS_KEY_ID.to_owned(), "configured".to_owned())]);
        let props = object_store_properties(&configured, env);
        assert_eq!(props[S3_ACCESS_KEY_ID], "configured");
        assert_eq!(props[S3_SECRET_ACCESS_KEY], "secret");
        assert_eq!(props[S3_ENDPOINT], "http://127.0.0.1:9000");
        assert_eq!(props[S3_REGION], "eu-west-1");
        assert_eq!(props[S3_PATH_STYLE_ACCESS], "true");
        assert!(!props.contains_key(S3_SESSION_TOKEN));
    }

    #[test]
    fn without_an_endpoint_addressing_is_virtual_host_style_in_the_default_region() {
        let props = object_store_properties(&BTreeMap::new(), |_| None);
        assert_eq!(props[S3_PATH_STYLE_ACCESS], "false");
        assert!(!is_truthy("false") && !is_truthy("0"));
        assert!(is_truthy("1") && is_truthy(" On") && is_truthy("t"));
        assert_eq!(props[S3_REGION], DEFAULT_REGION);
        let configured = BTreeMap::from([(S3_PATH_STYLE_ACCESS.to_owned(), " TRUE ".to_owned())]);
        let props = object_store_properties(&configured, |_| None);
        assert_eq!(props[S3_PATH_STYLE_ACCESS], "true");
    }
}
