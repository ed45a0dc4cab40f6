//! What the RocksDB integration tests share.
#![allow(clippy::unwrap_used)] // test code

/// A bucket directory `<temporary>/b` of its own: a RocksDB bucket's rows live in the instance
/// beside it (`<temporary>/.tidemark-rocksdb`), so each test's buckets get an instance of their
/// own.
pub struct BucketDir(
    // Held for its drop: the temporary directory goes with the bucket.
    #[allow(dead_code)] tempfile::TempDir,
    std::path::PathBuf,
);

impl BucketDir {
    pub fn path(&self) -> &std::path::Path {
        &self.1
    }
}

pub fn bucket_dir() -> BucketDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    std::fs::create_dir(&dir).unwrap();
    BucketDir(tmp, dir)
}
