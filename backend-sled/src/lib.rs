//! Tidemark sled backend.
