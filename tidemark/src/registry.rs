//! The registry of disk backends: the one place that maps a [`Backend`] to the crate that
//! implements it. A new backend is one arm here (plus its variant, name and cargo feature in
//! [`Backend`]); everything else reaches it through [`DiskBackend`].

use tidemark_disk::DiskBackend;
use tidemark_engine_api::{Error, Result};

use crate::Backend;

/// Something done with one disk backend's types (open a bucket, create a context).
#[cfg_attr(
    not(any(
        feature = "sled",
        feature = "redb",
        feature = "rocksdb",
        feature = "fjall"
    )),
    allow(dead_code, reason = "no disk backend is compiled in")
)]
pub(crate) trait Visit {
    /// What it produces.
    type Output;

    /// Does it with backend `B`.
    fn visit<B: DiskBackend>(self) -> Result<Self::Output>;
}

/// Runs `visit` with the disk backend `backend` names; [`Error::Unsupported`] naming the cargo
/// feature when the backend is not compiled in (and for the memory backend, which is no disk
/// backend: callers handle it first).
pub(crate) fn visit<V: Visit>(backend: Backend, visit: V) -> Result<V::Output> {
    match backend {
        #[cfg(feature = "sled")]
        Backend::Sled => visit.visit::<tidemark_backend_sled::Sled>(),
        #[cfg(feature = "redb")]
        Backend::Redb => visit.visit::<tidemark_backend_redb::Redb>(),
        #[cfg(feature = "rocksdb")]
        Backend::RocksDb => visit.visit::<tidemark_backend_rocksdb::RocksDb>(),
        #[cfg(feature = "fjall")]
        Backend::Fjall => visit.visit::<tidemark_backend_fjall::Fjall>(),
        other => {
            drop(visit);
            Err(not_compiled(other))
        }
    }
}

fn not_compiled(backend: Backend) -> Error {
    if backend == Backend::Memory {
        return Error::Unsupported("the memory backend is not a disk backend".to_string());
    }
    Error::Unsupported(format!(
        "backend {} is not compiled in; enable the `{}` cargo feature of the tidemark crate",
        backend.name(),
        backend.name()
    ))
}
