//! redb conformance
