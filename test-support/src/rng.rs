//! [`SplitMix64`]: the workspace's one deterministic pseudo-random generator, for workloads that
//! must be identical on every backend and in every run (tests, benchmarks, `tidemark compare`). Not for
//! anything that needs unpredictability.

/// SplitMix64 (Steele, Lea and Flood): 64 bits of state, full period, good enough statistics
/// for workload generation, and no dependency.
///
/// ```
/// use tidemark_test_support::rng::SplitMix64;
///
/// let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
/// assert_eq!(a.next_u64(), b.next_u64()); // same seed, same stream
/// assert!(a.below(10) < 10);
/// ```
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`; `0` when `n == 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// `len` incompressible bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_seeded_and_spread() {
        let mut a = SplitMix64::new(1);
        let first: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let mut b = SplitMix64::new(1);
        assert_eq!(first, (0..4).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(first, {
            let mut c = SplitMix64::new(2);
            (0..4).map(|_| c.next_u64()).collect::<Vec<_>>()
        });
        // Every residue of a small modulus shows up in a short stream.
        let mut seen = [false; 7];
        for _ in 0..200 {
            seen[a.below(7) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s), "{seen:?}");
        assert_eq!(a.below(0), 0);
        assert_eq!(a.bytes(13).len(), 13);
    }
}
