//! Tidemark redb backend.
