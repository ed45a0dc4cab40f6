//! Support for the hostile-file cases ([`crate::cases::hostile_files_after_clean_close`],
//! [`crate::cases::hostile_files_after_crash`]): a seeded workload and its model, the damage
//! done to files, and the child processes the damaged stores are opened in.

pub mod child;
pub mod damage;
pub mod workload;

pub use damage::Damage;
pub use workload::Workload;

/// The seed of a run: `TIDEMARK_HOSTILE_SEED` when set (to reproduce a failure), else drawn
/// from the clock. Always printed by the caller.
pub fn seed() -> u64 {
    if let Some(seed) = std::env::var(child::SEED_VAR)
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return seed;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}
