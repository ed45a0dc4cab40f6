//! The lakes the lake scenarios run against: [`MemoryLake`], the reference, and (cargo feature
//! `iceberg`) an Apache Iceberg table, written by its tiering writer and read by its lookuper,
//! with real commits, compaction, expiry and broken files. The table is either local
//! ([`IcebergTestLake`]: SQLite catalog, temporary directory) or shared
//! ([`IcebergSharedTestLake`]: its catalog on a PostgreSQL server, its warehouse on an
//! S3-protocol server, both found through
//! [`TestServers`](tidemark_lake_iceberg::test_servers::TestServers)); one implementation,
//! [`IcebergTestLakeOn`], serves both, generic over the [`TableSite`].

use std::sync::Arc;

use async_trait::async_trait;
use tidemark_bucket::lake::{LakeLookuper, LakeSnapshot, MemoryLake};
use tidemark_engine_api::Record;

/// A lake table as a scenario drives it: the host's WAL goes in, snapshots are committed,
/// compacted and expired, and lookupers read it. Every step panics on failure (a scenario step
/// that cannot run is a failed test).
#[async_trait]
pub trait TestLake: Send + Sync + Sized + 'static {
    /// The lookuper a bucket falls back to.
    type Reader: LakeLookuper + 'static;

    /// How test names and messages call the lake.
    const NAME: &'static str;

    /// Whether a lookuper whose snapshot expired moves by itself, on its next failed read, to a
    /// newer snapshot at the same end (a compaction's), instead of failing until refreshed.
    const MOVES_FORWARD_ON_EXPIRY: bool;

    /// Whether a failing lake still answers a key no data file can hold (its metadata, cached
    /// by the lookuper, says so) instead of failing.
    const METADATA_ANSWERS_ABSENT_KEYS: bool;

    /// A new, empty lake table.
    async fn create() -> Self;

    /// A new lookuper over the table, serving the empty lake until refreshed.
    fn reader(&self) -> Arc<Self::Reader>;

    /// Makes records reach the lake's input (the host logged them), in offset order.
    async fn append(&self, records: &[Record]);

    /// Commits a snapshot of every record below `end`.
    async fn commit(&self, end: u64) -> LakeSnapshot;

    /// Rewrites the table: a new snapshot at the latest end.
    async fn compact(&self) -> LakeSnapshot;

    /// Keeps only the newest `newest` snapshots, now and after every later commit.
    async fn retain_snapshots(&self, newest: usize);

    /// The newest snapshot (the empty lake before the first commit).
    async fn latest(&self) -> LakeSnapshot;

    /// Whether the table still keeps the snapshot with id `id`.
    async fn keeps(&self, id: u64) -> bool;

    /// The snapshot `reader` serves, `None` before its first refresh.
    fn served(reader: &Self::Reader) -> Option<LakeSnapshot>;

    /// Successful refreshes of `reader`.
    fn refreshes(reader: &Self::Reader) -> u64;

    /// Makes `reader`'s refreshes and lookups fail (`true`) or work again (`false`).
    async fn fail(&self, reader: &Self::Reader, failing: bool);
}

#[async_trait]
impl TestLake for MemoryLake {
    type Reader = MemoryLake;
    const NAME: &'static str = "memory lake";
    const MOVES_FORWARD_ON_EXPIRY: bool = false;
    const METADATA_ANSWERS_ABSENT_KEYS: bool = false;

    async fn create() -> Self {
        MemoryLake::new()
    }

    fn reader(&self) -> Arc<MemoryLake> {
        Arc::new(MemoryLake::reader(self))
    }

    async fn append(&self, records: &[Record]) {
        MemoryLake::append(self, records.iter().cloned()).expect("append to the memory lake");
    }

    async fn commit(&self, end: u64) -> LakeSnapshot {
        MemoryLake::commit(self, end).expect("commit to the memory lake")
    }

    async fn compact(&self) -> LakeSnapshot {
        MemoryLake::compact(self).expect("compact the memory lake")
    }

    async fn retain_snapshots(&self, newest: usize) {
        MemoryLake::retain_snapshots(self, newest).expect("retain memory lake snapshots");
    }

    async fn latest(&self) -> LakeSnapshot {
        MemoryLake::latest(self).unwrap_or_default()
    }

    async fn keeps(&self, id: u64) -> bool {
        MemoryLake::snapshot(self, id).is_some()
    }

    fn served(reader: &MemoryLake) -> Option<LakeSnapshot> {
        reader.served()
    }

    fn refreshes(reader: &MemoryLake) -> u64 {
        reader.counters().refreshes
    }

    async fn fail(&self, reader: &MemoryLake, failing: bool) {
        reader.fail_refreshes(failing);
        reader.fail_lookups(failing);
    }
}

/// A shared lake is the same lake.
#[async_trait]
impl<L: TestLake> TestLake for Arc<L> {
    type Reader = L::Reader;
    const NAME: &'static str = L::NAME;
    const MOVES_FORWARD_ON_EXPIRY: bool = L::MOVES_FORWARD_ON_EXPIRY;
    const METADATA_ANSWERS_ABSENT_KEYS: bool = L::METADATA_ANSWERS_ABSENT_KEYS;

    async fn create() -> Self {
        Arc::new(L::create().await)
    }

    fn reader(&self) -> Arc<L::Reader> {
        (**self).reader()
    }

    async fn append(&self, records: &[Record]) {
        (**self).append(records).await;
    }

    async fn commit(&self, end: u64) -> LakeSnapshot {
        (**self).commit(end).await
    }

    async fn compact(&self) -> LakeSnapshot {
        (**self).compact().await
    }

    async fn retain_snapshots(&self, newest: usize) {
        (**self).retain_snapshots(newest).await;
    }

    async fn latest(&self) -> LakeSnapshot {
        (**self).latest().await
    }

    async fn keeps(&self, id: u64) -> bool {
        (**self).keeps(id).await
    }

    fn served(reader: &L::Reader) -> Option<LakeSnapshot> {
        L::served(reader)
    }

    fn refreshes(reader: &L::Reader) -> u64 {
        L::refreshes(reader)
    }

    async fn fail(&self, reader: &L::Reader, failing: bool) {
        (**self).fail(reader, failing).await;
    }
}

#[cfg(feature = "iceberg")]
pub use iceberg::{
    IcebergSharedTestLake, IcebergTestLake, IcebergTestLakeOn, LocalDir, SharedServers, TableSite,
};

#[cfg(feature = "iceberg")]
mod iceberg {
    use std::path::PathBuf;
    use std::sync::Arc;

    use async_trait::async_trait;
    use tempfile::TempDir;
    use tidemark_bucket::lake::LakeSnapshot;
    use tidemark_engine_api::Record;
    use tidemark_lake_iceberg::test_servers::TestServers;
    use tidemark_lake_iceberg::{IcebergLake, IcebergLookuper, TieringWriter};

    use super::TestLake;

    /// The bucket id the scenario's bucket has in the table.
    const BUCKET: u64 = 7;

    /// Where an [`IcebergTestLakeOn`] keeps its table: its catalog and warehouse, and what of
    /// the warehouse to move away to make the table fail.
    #[async_trait]
    pub trait TableSite: Send + Sync + Sized + 'static {
        /// How test names and messages call a lake on this site.
        const NAME: &'static str;

        /// Creates a new, empty table, with what must live as long as it.
        async fn create() -> (IcebergLake, Self);

        /// The directories holding the table's data files, each with where failing moves it:
        /// the data files as they are stored, so reading them fails as it does when they are
        /// gone.
        fn moved(&self, lake: &IcebergLake) -> Vec<(PathBuf, PathBuf)>;
    }

    /// A table in a temporary directory: the embedded (SQLite) catalog and the directory as
    /// the warehouse ([`IcebergLake::open`]).
    pub struct LocalDir {
        _tmp: TempDir,
    }

    #[async_trait]
    impl TableSite for LocalDir {
        const NAME: &'static str = "Iceberg lake";

        async fn create() -> (IcebergLake, LocalDir) {
            let tmp = tempfile::Builder::new()
                .prefix("tidemark-iceberg-")
                .tempdir()
                .expect("create a temporary directory");
            let lake = IcebergLake::open(tmp.path().join("lake"))
                .await
                .expect("create the Iceberg table");
            (lake, LocalDir { _tmp: tmp })
        }

        fn moved(&self, lake: &IcebergLake) -> Vec<(PathBuf, PathBuf)> {
            let dir = lake.dir().expect("a local Iceberg table has a directory");
            vec![(dir.join("data"), dir.join("data.away"))]
        }
    }

    /// A table of its own on the shared test servers ([`TestServers`]): its catalog on the
    /// PostgreSQL server, its warehouse a prefix of the S3-protocol server's bucket. Failing
    /// moves its data objects away on the S3 server's disk.
    pub struct SharedServers(TestServers);

    #[async_trait]
    impl TableSite for SharedServers {
        const NAME: &'static str = "Iceberg lake on PostgreSQL and S3";

        async fn create() -> (IcebergLake, SharedServers) {
            let servers = TestServers::get();
            let config = servers.table(&TestServers::unique_name("conformance"));
            let lake = IcebergLake::open_with(&config)
                .await
                .expect("create the Iceberg table on the test servers");
            (lake, SharedServers(servers))
        }

        fn moved(&self, lake: &IcebergLake) -> Vec<(PathBuf, PathBuf)> {
            let data = format!("{}/data", lake.location());
            let path = self
                .0
                .object_path(&data)
                .unwrap_or_else(|| panic!("{data} is not on the S3 test server"));
            let away = path.with_file_name("data.away");
            vec![(path, away)]
        }
    }

    /// An Iceberg table holding one bucket's rows, kept where `S` says, with its tiering
    /// writer. Failing means what it means for a real table: its catalog cannot be reached and
    /// its data files are moved away, so refreshes cannot read the table and lookups cannot read
    /// their files.
    pub struct IcebergTestLakeOn<S: TableSite> {
        lake: IcebergLake,
        writer: TieringWriter,
        retain: std::sync::Mutex<Option<usize>>,
        site: S,
    }

    /// An Iceberg table in a temporary directory ([`LocalDir`]).
    pub type IcebergTestLake = IcebergTestLakeOn<LocalDir>;

    /// An Iceberg table with its catalog on a PostgreSQL server and its warehouse on an
    /// S3-protocol server ([`SharedServers`]).
    pub type IcebergSharedTestLake = IcebergTestLakeOn<SharedServers>;

    impl<S: TableSite> IcebergTestLakeOn<S> {
        async fn expire(&self) {
            let retain = *self
                .retain
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(newest) = retain {
                self.lake
                    .expire_snapshots(newest)
                    .await
                    .expect("expire Iceberg snapshots");
            }
        }
    }

    #[async_trait]
    impl<S: TableSite> TestLake for IcebergTestLakeOn<S> {
        type Reader = IcebergLookuper;
        const NAME: &'static str = S::NAME;
        // The same on every site: the table's behaviour does not depend on where it is.
        const MOVES_FORWARD_ON_EXPIRY: bool = true;
        const METADATA_ANSWERS_ABSENT_KEYS: bool = true;

        async fn create() -> Self {
            let (lake, site) = S::create().await;
            let writer = lake
                .tiering_writer()
                .await
                .expect("open the tiering writer");
            IcebergTestLakeOn {
                lake,
                writer,
                retain: std::sync::Mutex::new(None),
                site,
            }
        }

        fn reader(&self) -> Arc<IcebergLookuper> {
            Arc::new(self.lake.lookuper(BUCKET))
        }

        async fn append(&self, records: &[Record]) {
            self.writer
                .append(BUCKET, records.iter().cloned())
                .await
                .expect("append to the Iceberg lake");
        }

        async fn commit(&self, end: u64) -> LakeSnapshot {
            let commit = self
                .writer
                .commit(&[(BUCKET, end)])
                .await
                .expect("commit to the Iceberg lake");
            self.expire().await;
            commit.snapshot(BUCKET)
        }

        async fn compact(&self) -> LakeSnapshot {
            let compacted = self.lake.compact().await.expect("compact the Iceberg lake");
            if compacted.is_none() {
                // An empty table: a snapshot at end 0 stands for the rewrite.
                return self.commit(0).await;
            }
            self.expire().await;
            self.latest().await
        }

        async fn retain_snapshots(&self, newest: usize) {
            *self
                .retain
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(newest);
            self.expire().await;
        }

        async fn latest(&self) -> LakeSnapshot {
            self.lake
                .latest(BUCKET)
                .await
                .expect("read the Iceberg lake's latest snapshot")
        }

        async fn keeps(&self, id: u64) -> bool {
            self.lake
                .snapshots(BUCKET)
                .await
                .expect("list the Iceberg lake's snapshots")
                .iter()
                .any(|s| s.id == id)
        }

        fn served(reader: &IcebergLookuper) -> Option<LakeSnapshot> {
            (reader.counters().refreshes > 0).then(|| reader.served())
        }

        fn refreshes(reader: &IcebergLookuper) -> u64 {
            reader.counters().refreshes
        }

        async fn fail(&self, _reader: &IcebergLookuper, failing: bool) {
            self.lake.fail_catalog(failing);
            for (path, away) in self.site.moved(&self.lake) {
                let (from, to) = if failing { (path, away) } else { (away, path) };
                std::fs::rename(&from, &to)
                    .unwrap_or_else(|e| panic!("move {} to {}: {e}", from.display(), to.display()));
            }
        }
    }
}
