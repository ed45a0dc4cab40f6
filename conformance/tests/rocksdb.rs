//! rocksdb conformance
