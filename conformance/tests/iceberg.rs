//! The lake scenarios on an Apache Iceberg table (cargo feature `iceberg`), with redb as the
//! local store: the same scenarios every backend runs on `MemoryLake`, against a real table
//! format with its commits, compaction, expiry and failures.

tidemark::redb! {
    mod redb {
        mod bucket_iceberg {
            tidemark_conformance::iceberg_bucket_cases!(
                tidemark_conformance::factories::DiskFactory::<tidemark::redb::RedbStorage>::new()
            );
        }
    }
}
