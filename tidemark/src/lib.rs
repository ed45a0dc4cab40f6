//! Tidemark facade.
