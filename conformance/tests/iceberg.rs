//! The lake scenarios on an Apache Iceberg table (cargo feature `iceberg`), with redb as the
//! local store: the same scenarios every backend runs on `MemoryLake`, against a real table
//! format with its commits, compaction, expiry and failures, on two tables:
//!
//! - `redb::bucket_iceberg::<scenario>`: a local table (SQLite catalog, temporary directory);
//! - `redb::bucket_iceberg_shared::<scenario>`: a shared table, its catalog on a PostgreSQL
//!   server and its warehouse on an S3-protocol server (the servers `scripts/lake-servers.sh`
//!   starts and names in `TIDEMARK_TEST_*`; without them these tests fail saying so).

tidemark::redb! {
    mod redb {
        mod bucket_iceberg {
            tidemark_conformance::iceberg_bucket_cases!(
                tidemark_conformance::factories::DiskFactory::<tidemark::redb::RedbStorage>::new()
            );
        }
        mod bucket_iceberg_shared {
            tidemark_conformance::iceberg_bucket_cases!(shared:
                tidemark_conformance::factories::DiskFactory::<tidemark::redb::RedbStorage>::new()
            );
        }
    }
}
