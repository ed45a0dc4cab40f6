//! The table's entry in an Iceberg SQL catalog: the `iceberg_tables` and
//! `iceberg_namespace_properties` tables of Iceberg's JDBC catalog (Java's `JdbcCatalog`,
//! pyiceberg's `SqlCatalog`, the `iceberg-catalog-sql` crate), on an embedded SQLite file or a
//! PostgreSQL server, so every engine that reads that catalog finds the lake table.
//!
//! The entry names the table's current metadata file. A commit replaces it by compare-and-swap:
//! `UPDATE … SET metadata_location = <new> WHERE … AND metadata_location = <the one the commit
//! read>`, Iceberg's optimistic concurrency, so of several writers racing from one metadata file
//! exactly one wins and the others learn they lost and retry on the new one.
//!
//! iceberg-rust's own SQL catalog commits only the updates of its built-in actions (its
//! `TableCommit` cannot be built outside the crate), and the lake commits snapshots it builds
//! itself (a compaction's `replace`), so the lake keeps the entry with these statements, the
//! same the crate issues.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions, Postgres};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tidemark_bucket::{Error, Result};

use crate::error::lake_error;

/// How long a statement waits for another process's lock on an SQLite catalog file before it
/// fails: writers of one table take turns on it for a moment each.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections each handle keeps to the catalog: commits are one statement at a time.
const MAX_CONNECTIONS: u32 = 4;

/// How long a commit waits for another process's commit of the table to finish before it goes
/// ahead without the commit lock (the compare-and-swap still decides which lands).
const COMMIT_LOCK_WAIT: Duration = Duration::from_secs(10);

/// PostgreSQL's error code for a lock wait that timed out (`lock_not_available`).
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The JDBC catalog's tables, as its implementations create them.
const CREATE_TABLES: &str = "CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name VARCHAR(255) NOT NULL,
    table_namespace VARCHAR(255) NOT NULL,
    table_name VARCHAR(255) NOT NULL,
    metadata_location VARCHAR(1000),
    previous_metadata_location VARCHAR(1000),
    iceberg_type VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name))";
const CREATE_NAMESPACES: &str = "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name VARCHAR(255) NOT NULL,
    namespace VARCHAR(255) NOT NULL,
    property_key VARCHAR(255),
    property_value VARCHAR(1000),
    PRIMARY KEY (catalog_name, namespace, property_key))";

/// Whether the table `name` exists (in the connection's search path).
async fn pg_table_exists(pool: &PgPool, name: &str) -> Result<bool> {
    sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL")
        .bind(name)
        .fetch_one(pool)
        .await
        .map_err(|e| lake_error("cannot read the PostgreSQL lake catalog's tables", e))
}

/// The table's commit lock ([`SqlCatalog::lock_commits`]), held until
/// [released](Self::release) or dropped.
pub(crate) struct CommitLock {
    /// The transaction holding the advisory lock, if one is held.
    held: Option<sqlx::Transaction<'static, Postgres>>,
}

impl CommitLock {
    /// Releases the lock now. Dropped instead, it rolls back as its connection goes back to
    /// the pool, which releases the lock too.
    pub(crate) async fn release(mut self) {
        if let Some(held) = self.held.take() {
            // A failed rollback closes the connection, which ends the transaction.
            let _ = held.rollback().await;
        }
    }
}

/// Where a catalog lives, parsed from its URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CatalogUri {
    /// `sqlite://<path>`: an embedded SQLite file, created when missing.
    Sqlite(String),
    /// `postgres://…` or `postgresql://…`: a PostgreSQL server.
    Postgres(String),
}

impl FromStr for CatalogUri {
    type Err = Error;

    fn from_str(uri: &str) -> Result<Self> {
        if let Some(path) = uri.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(Error::invalid(
                    "an SQLite catalog URI names a file: sqlite://<path>",
                ));
            }
            return Ok(CatalogUri::Sqlite(path.to_owned()));
        }
        if uri.starts_with("postgres://") || uri.starts_with("postgresql://") {
            return Ok(CatalogUri::Postgres(uri.to_owned()));
        }
        Err(Error::invalid(format!(
            "unknown lake catalog URI {uri:?}: expected sqlite://<path> or postgres://…"
        )))
    }
}

#[derive(Debug, Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// One table's entry in a SQL catalog (see the [module](self)).
#[derive(Debug, Clone)]
pub(crate) struct SqlCatalog {
    pool: Pool,
    catalog: String,
    namespace: String,
    table: String,
}

impl SqlCatalog {
    /// Connects to the catalog at `uri` (creating an SQLite file and, either way, the catalog's
    /// tables when missing) for the table `namespace.table` of the catalog named `catalog`.
    pub(crate) async fn connect(
        uri: &CatalogUri,
        catalog: &str,
        namespace: &str,
        table: &str,
    ) -> Result<Self> {
        let pool = match uri {
            CatalogUri::Sqlite(path) => {
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    // Readers go on while a writer commits, and a commit is durable when the
                    // statement returns (a power loss cannot take it back).
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(SQLITE_BUSY_TIMEOUT);
                let pool = SqlitePoolOptions::new()
                    .max_connections(MAX_CONNECTIONS)
                    .connect_with(options)
                    .await
                    .map_err(|e| {
                        lake_error(format!("cannot open the SQLite lake catalog {path}"), e)
                    })?;
                Pool::Sqlite(pool)
            }
            CatalogUri::Postgres(url) => {
                let pool = PgPoolOptions::new()
                    .max_connections(MAX_CONNECTIONS)
                    .connect(url)
                    .await
                    .map_err(|e| {
                        lake_error(
                            format!(
                                "cannot connect to the PostgreSQL lake catalog {}",
                                redact(url)
                            ),
                            e,
                        )
                    })?;
                Pool::Postgres(pool)
            }
        };
        let catalog = SqlCatalog {
            pool,
            catalog: catalog.to_owned(),
            namespace: namespace.to_owned(),
            table: table.to_owned(),
        };
        catalog.ensure("iceberg_tables", CREATE_TABLES).await?;
        catalog
            .ensure("iceberg_namespace_properties", CREATE_NAMESPACES)
            .await?;
        Ok(catalog)
    }

    /// Creates the catalog table `name` with `ddl` when it is missing.
    async fn ensure(&self, name: &str, ddl: &str) -> Result<()> {
        let Pool::Postgres(pool) = &self.pool else {
            return self.execute(ddl, &[]).await.map(|_| ());
        };
        // Only when missing: creating needs a privilege a role that only commits may lack.
        if pg_table_exists(pool, name).await? {
            return Ok(());
        }
        match self.execute(ddl, &[]).await {
            Ok(_) => Ok(()),
            // Two processes creating it at once: PostgreSQL's `IF NOT EXISTS` can still fail on
            // a unique index of its own catalog, and then the other one created it.
            Err(e) => match pg_table_exists(pool, name).await? {
                true => Ok(()),
                false => Err(e),
            },
        }
    }

    /// The table's current metadata location, or `None` while the catalog has no such table.
    pub(crate) async fn current(&self) -> Result<Option<String>> {
        let sql = "SELECT metadata_location FROM iceberg_tables \
                   WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? \
                   AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)";
        let args = [
            self.catalog.as_str(),
            self.namespace.as_str(),
            self.table.as_str(),
        ];
        let location = match &self.pool {
            Pool::Sqlite(pool) => {
                bind(sqlx::query_scalar::<_, Option<String>>(sql), &args)
                    .fetch_optional(pool)
                    .await
            }
            Pool::Postgres(pool) => {
                bind(
                    sqlx::query_scalar::<_, Option<String>>(&numbered(sql)),
                    &args,
                )
                .fetch_optional(pool)
                .await
            }
        }
        .map_err(|e| lake_error("cannot read the lake table's catalog entry", e))?;
        Ok(location.flatten())
    }

    /// Adds the table with its first metadata file at `location`, and its namespace. Returns
    /// `false` when the table was there already (another writer created it first): nothing is
    /// changed then.
    pub(crate) async fn create(&self, location: &str) -> Result<bool> {
        // The namespace exists for the readers that list namespaces (pyiceberg and Java read
        // this row as its existence).
        let namespace = "INSERT INTO iceberg_namespace_properties \
                         (catalog_name, namespace, property_key, property_value) \
                         VALUES (?, ?, 'exists', 'true') ON CONFLICT DO NOTHING";
        self.execute(namespace, &[&self.catalog, &self.namespace])
            .await?;
        let added = self
            .execute(
                "INSERT INTO iceberg_tables \
                 (catalog_name, table_namespace, table_name, metadata_location, iceberg_type) \
                 VALUES (?, ?, ?, ?, 'TABLE') ON CONFLICT DO NOTHING",
                &[&self.catalog, &self.namespace, &self.table, location],
            )
            .await?;
        Ok(added == 1)
    }

    /// Takes the table's commit lock, which Tidemark's writers in every process hold from
    /// reading the table to swapping its entry: on PostgreSQL an advisory lock, which queues
    /// waiters, so a writer that lost a race is not beaten again and again by writers that
    /// commit back to back. It only orders Tidemark's own commits: the swap still decides
    /// (other engines do not take it), and a commit that waited [`COMMIT_LOCK_WAIT`] goes ahead
    /// without it. An SQLite catalog has none (one host's processes; the swap alone decides).
    pub(crate) async fn lock_commits(&self) -> Result<CommitLock> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(CommitLock { held: None });
        };
        let cannot = |e| lake_error("cannot take the lake table's commit lock", e);
        // A transaction's lock: however the holder lets go of it (released, failed, or dropped
        // mid-wait by a cancelled commit), the transaction ends and the lock with it; a session
        // lock would stay with a pooled connection returned mid-wait.
        let mut held = pool.begin().await.map_err(cannot)?;
        // Only this transaction waits at most this long; the pool's other statements do not.
        sqlx::query("SELECT set_config('lock_timeout', $1, true)")
            .bind(format!("{}ms", COMMIT_LOCK_WAIT.as_millis()))
            .execute(&mut *held)
            .await
            .map_err(cannot)?;
        let key = format!(
            "tidemark-commit/{}/{}/{}",
            self.catalog, self.namespace, self.table
        );
        let locked = sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(key)
            .execute(&mut *held)
            .await;
        match locked {
            Ok(_) => Ok(CommitLock { held: Some(held) }),
            // Waited long enough: go ahead without it (the aborted transaction rolls back).
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
                Ok(CommitLock { held: None })
            }
            Err(e) => Err(cannot(e)),
        }
    }

    /// Replaces the table's metadata location `expected` by `new`, as one compare-and-swap.
    /// Returns `false`, changing nothing, when the entry no longer names `expected` (another
    /// writer committed first).
    pub(crate) async fn swap(&self, expected: &str, new: &str) -> Result<bool> {
        let swapped = self
            .execute(
                "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
                 WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? \
                 AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) \
                 AND metadata_location = ?",
                &[
                    new,
                    expected,
                    &self.catalog,
                    &self.namespace,
                    &self.table,
                    expected,
                ],
            )
            .await?;
        Ok(swapped == 1)
    }

    /// Runs `sql` (with `?` placeholders) with `args`; returns the rows it changed.
    async fn execute(&self, sql: &str, args: &[&str]) -> Result<u64> {
        let done = match &self.pool {
            Pool::Sqlite(pool) => bind(sqlx::query(sql), args)
                .execute(pool)
                .await
                .map(|r| r.rows_affected()),
            Pool::Postgres(pool) => bind(sqlx::query(&numbered(sql)), args)
                .execute(pool)
                .await
                .map(|r| r.rows_affected()),
        };
        done.map_err(|e| lake_error("the lake catalog refused a statement", e))
    }
}

/// Binds `args` in order.
fn bind<'q, Q: Bindable<'q>>(mut query: Q, args: &[&'q str]) -> Q {
    for arg in args {
        query = query.bind_str(arg);
    }
    query
}

/// A query whose next placeholder takes a string.
trait Bindable<'q>: Sized {
    fn bind_str(self, value: &'q str) -> Self;
}

impl<'q, DB> Bindable<'q> for sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>
where
    DB: sqlx::Database,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    fn bind_str(self, value: &'q str) -> Self {
        self.bind(value)
    }
}

impl<'q, DB, O> Bindable<'q>
    for sqlx::query::QueryScalar<'q, DB, O, <DB as sqlx::Database>::Arguments<'q>>
where
    DB: sqlx::Database,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    fn bind_str(self, value: &'q str) -> Self {
        self.bind(value)
    }
}

/// `sql` with PostgreSQL's numbered placeholders (`$1`, `$2`, …) for `?`.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// `url` without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_their_catalog() {
        assert_eq!(
            "sqlite:///tmp/c.db".parse::<CatalogUri>().ok(),
            Some(CatalogUri::Sqlite("/tmp/c.db".to_owned()))
        );
        assert!(matches!(
            "postgresql://u:p@127.0.0.1/db".parse::<CatalogUri>(),
            Ok(CatalogUri::Postgres(_))
        ));
        assert!("sqlite://".parse::<CatalogUri>().is_err());
        assert!("mysql://x".parse::<CatalogUri>().is_err());
    }

    #[test]
    fn postgres_placeholders_are_numbered() {
        assert_eq!(numbered("a = ? AND b = ?"), "a = $1 AND b = $2");
    }

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            redact("postgres://tidemark:secret@127.0.0.1:5432/lake"),
            "postgres://tidemark:***@127.0.0.1:5432/lake"
        );
        assert_eq!(
            redact("postgres://127.0.0.1/lake"),
            "postgres://127.0.0.1/lake"
        );
    }

    #[tokio::test]
    async fn a_swap_from_a_stale_location_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let uri = CatalogUri::Sqlite(dir.path().join("c.db").to_string_lossy().into_owned());
        let a = SqlCatalog::connect(&uri, "cat", "ns", "t").await.unwrap();
        let b = SqlCatalog::connect(&uri, "cat", "ns", "t").await.unwrap();
        assert_eq!(a.current().await.unwrap(), None);
        assert!(a.create("m0").await.unwrap());
        assert!(!b.create("other").await.unwrap());
        assert_eq!(b.current().await.unwrap().as_deref(), Some("m0"));
        assert!(a.swap("m0", "m1").await.unwrap());
        assert!(!b.swap("m0", "m1-from-b").await.unwrap());
        assert_eq!(b.current().await.unwrap().as_deref(), Some("m1"));
        assert!(b.swap("m1", "m2").await.unwrap());
        assert_eq!(a.current().await.unwrap().as_deref(), Some("m2"));
    }
}
