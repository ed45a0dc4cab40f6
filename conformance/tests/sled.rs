//! sled conformance
