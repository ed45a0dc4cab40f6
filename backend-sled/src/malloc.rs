//! glibc's dynamic mmap threshold, which made sled databases reopened in a busy process resident.
//!
//! sled 0.34 allocates large zeroed arrays (megabytes of page table) when a database opens.
//! glibc serves an allocation above its mmap threshold (128 KiB at start) with fresh pages from
//! the kernel, which stay out of resident memory until written; but when such a chunk is freed,
//! glibc raises the threshold to the chunk's size, so the arrays of the databases opened next
//! come from the heap, from pages earlier databases dirtied, and zeroing them makes all of them
//! resident: about 6 MiB per database reopened while others are open, against 0.25 MiB at a first
//! open. Raw sled (no Tidemark code), 256 databases kept open while 300 are reopened and dropped
//! in turn: 1.7 GiB resident, 59 MiB with the threshold fixed (BENCHMARKS § Ten thousand
//! buckets). Setting `M_MMAP_THRESHOLD` fixes it and turns glibc's adjustment off.
//!
//! The setting is the whole process's, so a context changes it only when its stores will be
//! released and reopened (more buckets than open stores) and its options allow it
//! ([`crate::SledContextOptions::fixed_mmap_threshold`]); once per process. Elsewhere than glibc
//! on Linux it does nothing.

/// The threshold set: glibc's own starting value.
pub const FIXED_MMAP_THRESHOLD: usize = 128 * 1024;

/// Fixes glibc's mmap threshold at [`FIXED_MMAP_THRESHOLD`], once per process.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn fix_mmap_threshold() {
    static FIXED: std::sync::Once = std::sync::Once::new();
    FIXED.call_once(|| {
        let threshold = libc::c_int::try_from(FIXED_MMAP_THRESHOLD).unwrap_or(libc::c_int::MAX);
        // SAFETY: `mallopt` sets an allocator parameter from two integers; it reads or writes
        // no memory of ours, and glibc allows it at any time from any thread.
        #[allow(unsafe_code)]
        let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, threshold) };
        if set == 1 {
            tracing::debug!(
                threshold = FIXED_MMAP_THRESHOLD,
                "fixed glibc's mmap threshold for released and reopened sled databases"
            );
        } else {
            tracing::warn!(
                "glibc refused to fix its mmap threshold; reopened sled databases may stay large"
            );
        }
    });
}

/// Not glibc: nothing to fix.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn fix_mmap_threshold() {}
