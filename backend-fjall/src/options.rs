//! [`FjallContextOptions`]: the settings of a fjall context, which the shared databases are
//! built with.

/// Sizes and limits of a [`FjallContext`](crate::FjallContext). `Default` suits a process with many small buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FjallContextOptions {
    /// Block cache of the context, bytes (default 64 MiB): one cache every shared database the
    /// context opens reads through.
    pub cache_bytes: u64,
    /// Worker threads (flushes and compactions) of each shared database (default 2, at least 1).
    pub worker_threads: usize,
    /// Memtable size of a bucket's keyspace before it is flushed, bytes (default 8 MiB).
    /// Fixed when the keyspace is created.
    pub memtable_bytes: u64,
    /// Journal size past which fjall flushes the keyspaces holding the oldest journal, bytes
    /// (default 128 MiB), split evenly among the shared databases `max_buckets` buckets of one
    /// directory fill, each at least 64 MiB (fjall's least). It bounds the memtables of all
    /// buckets of a database together: fjall 3 has no separate memtable budget.
    pub journal_budget_bytes: u64,
    /// Table files the shared databases keep open at most (default 256), split evenly among
    /// the databases `max_buckets` buckets of one directory fill, each at least 10 (fjall's
    /// least).
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
