//! [`FjallContextOptions`]: the settings of a fjall context, which the shared databases are
//! built with.

/// Sizes and limits of a [`FjallContext`](crate::FjallContext). `Default` suits a process with many small buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FjallContextOptions {
    /// Block cache of each shared database, bytes (default 64 MiB).
    pub cache_bytes: u64,
    /// Worker threads (flushes and compactions) of each shared database (default 2, at least 1).
    pub worker_threads: usize,
    /// Memtable size of a bucket's data keyspace before it is flushed, bytes (default 8 MiB).
    /// Fixed when the keyspace is created.
    pub memtable_bytes: u64,
    /// Journal size of one shared database past which fjall flushes the keyspaces holding the
    /// oldest journal, bytes (default 128 MiB, at least 64 MiB). It bounds the memtables of all buckets of the
    /// database together: fjall 3 has no separate memtable budget.
    pub journal_budget_bytes: u64,
    /// Table files each shared database keeps open at most (default 256, at least 10).
    pub max_cached_files: usize,
    /// The most buckets open from the context at once (default 1,024); an open beyond it is
    /// [`tidemark_engine_api::Error::ResourceLimit`].
    pub max_buckets: usize,
}

impl Default for FjallContextOptions {
    fn default() -> Self {
        FjallContextOptions {
            cache_bytes: 64 << 20,
            worker_threads: 2,
            memtable_bytes: 8 << 20,
            journal_budget_bytes: 128 << 20,
            max_cached_files: 256,
            max_buckets: 1024,
        }
    }
}
