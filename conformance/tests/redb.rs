//! The whole suite and the bucket scenarios on one disk backend, the one this file is named after
//! (empty in a build without it).

tidemark::redb! { tidemark_conformance::disk_suite!(redb: tidemark::redb::ReleasingRedbStorage); }
