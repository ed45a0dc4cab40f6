//! Tidemark rocksdb backend.
