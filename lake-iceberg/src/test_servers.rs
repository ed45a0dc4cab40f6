//! The shared catalog and object store the tests of a shared lake run against: a PostgreSQL
//! server and an S3-protocol server that `scripts/lake-servers.sh` starts on loopback (and
//! `scripts/test.sh` through it), found through the environment variables it exports.

use std::path::PathBuf;

use crate::LakeConfig;

/// Where the running test servers are.
#[derive(Debug, Clone)]
pub struct TestServers {
    /// The PostgreSQL catalog's URI.
    pub postgres_url: String,
    /// The S3-protocol server's endpoint, `http://127.0.0.1:<port>`.
    pub s3_endpoint: String,
    /// A bucket that exists on it.
    pub s3_bucket: String,
    /// Its access key.
    pub s3_access_key: String,
    /// Its secret key.
    pub s3_secret_key: String,
    /// The directory the server keeps its buckets in (a bucket is a directory below it), for
    /// tests that damage objects.
    pub s3_root: PathBuf,
}

impl TestServers {
    /// The servers the environment names, or what is missing and how to start them.
    pub fn from_env() -> Result<TestServers, String> {
        let var = |name: &str| {
            std::env::var(name).map_err(|_| {
                format!(
                    "{name} is not set: the shared-lake tests run against the PostgreSQL and \
                     S3-protocol servers scripts/lake-servers.sh starts; run ./scripts/test.sh, \
                     or `source scripts/lake-servers.sh && tidemark_start_lake_servers` first"
                )
            })
        };
        Ok(TestServers {
            postgres_url: var("TIDEMARK_TEST_POSTGRES_URL")?,
            s3_endpoint: var("TIDEMARK_TEST_S3_ENDPOINT")?,
            s3_bucket: var("TIDEMARK_TEST_S3_BUCKET")?,
            s3_access_key: var("TIDEMARK_TEST_S3_ACCESS_KEY")?,
            s3_secret_key: var("TIDEMARK_TEST_S3_SECRET_KEY")?,
            s3_root: PathBuf::from(var("TIDEMARK_TEST_S3_ROOT")?),
        })
    }

    /// The servers, failing the calling test with what is missing.
    #[allow(clippy::panic)] // a test helper: a test without its servers fails
    pub fn get() -> TestServers {
        TestServers::from_env().unwrap_or_else(|e| panic!("{e}"))
    }

    /// A new table of its own: catalog name and object prefix `name` (unique per test, so
    /// tests share the servers without seeing each other's tables).
    pub fn table(&self, name: &str) -> LakeConfig {
        let mut config = LakeConfig::shared(
            self.postgres_url.clone(),
            format!("s3://{}/{name}", self.s3_bucket),
        )
        .with_storage(iceberg::io::S3_ENDPOINT, self.s3_endpoint.clone())
        .with_storage(iceberg::io::S3_ACCESS_KEY_ID, self.s3_access_key.clone())
        .with_storage(
            iceberg::io::S3_SECRET_ACCESS_KEY,
            self.s3_secret_key.clone(),
        );
        config.catalog_name = name.to_owned();
        config
    }

    /// A name no other table on the servers has.
    pub fn unique_name(prefix: &str) -> String {
        format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
    }

    /// Where the server keeps the object at `location` (`s3://bucket/key`) on its disk.
    pub fn object_path(&self, location: &str) -> Option<PathBuf> {
        let rest = location.strip_prefix("s3://")?;
        Some(self.s3_root.join(rest))
    }
}
