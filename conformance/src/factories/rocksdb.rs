//! rocksdb factory (written with the rocksdb backend issue).
