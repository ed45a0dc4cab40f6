//! memory conformance
