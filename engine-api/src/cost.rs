//! What a reclaim costs on a backend, declared by the backend: the scheduler chooses when a
//! reclaim pays for itself from it, never from the backend's name.

/// The cost model of a backend's reclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReclaimCost {
    /// A reclaim visits only what is covered (a range-scan sweep over an offset index, or the
    /// memory engine's map): it costs about what it removes, so it pays for itself as soon as
    /// anything is covered.
    Proportional,
    /// A reclaim rewrites the bucket's live data (an LSM compaction): it pays for itself only
    /// once the covered bytes are a large enough share of the bucket.
    Rewrite,
}
