//! Bytes of the window the lake has not absorbed, as a run samples it: running sums of the
//! records' stored lengths from the lake's end on.

use std::collections::VecDeque;

use tidemark::Record;

/// Bytes stored by the records of the window the lake has not absorbed (key plus encoded value,
/// as the engines store them): running sums from the lake's end on, so the bytes of any range in
/// it are one subtraction and what the lake has absorbed is forgotten.
#[derive(Debug, Clone)]
pub struct WindowBytes {
    /// The offset of `sums[0]`.
    base: u64,
    /// `sums[i]` = bytes of the records below `base + i`, since offset 0.
    sums: VecDeque<u64>,
}

impl Default for WindowBytes {
    fn default() -> Self {
        WindowBytes {
            base: 0,
            sums: VecDeque::from([0]),
        }
    }
}

impl WindowBytes {
    /// Adds the records that follow the last one added (a batch, in offset order).
    pub fn push(&mut self, records: &[Record]) {
        let mut total = self.sums.back().copied().unwrap_or(0);
        for record in records {
            total = total.saturating_add(record.stored_len());
            self.sums.push_back(total);
        }
    }

    /// Bytes of the records at `from..to`, clamped to the offsets held.
    pub fn window(&self, from: u64, to: u64) -> u64 {
        let at = |o: u64| {
            let i = usize::try_from(o.saturating_sub(self.base)).unwrap_or(usize::MAX);
            self.sums.get(i).or(self.sums.back()).copied().unwrap_or(0)
        };
        at(to).saturating_sub(at(from))
    }

    /// Forgets the records below `offset` (the lake holds them; the window never reaches back).
    pub fn forget_below(&mut self, offset: u64) {
        while self.base < offset && self.sums.len() > 1 {
            self.sums.pop_front();
            self.base += 1;
        }
    }

    /// Offsets held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sums.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_test_support::stream::{RecordStream, SeededStream};

    #[test]
    fn window_bytes_are_the_records_stored_lengths_and_forget_what_the_lake_holds() {
        let s = SeededStream::new(3, 100, 10, 16);
        let mut bytes = WindowBytes::default();
        for from in (0..50).step_by(10) {
            bytes.push(s.batch(from, from + 10).records());
        }
        let direct = |from: u64, to: u64| (from..to).map(|o| s.record(o).stored_len()).sum::<u64>();
        assert_eq!(bytes.window(10, 30), direct(10, 30));
        assert_eq!(bytes.window(30, 10), 0);
        assert_eq!(
            bytes.window(0, 50),
            bytes.window(0, 500),
            "clamped to the end held"
        );
        bytes.forget_below(20);
        assert_eq!(bytes.len(), 30);
        assert_eq!(bytes.window(25, 50), direct(25, 50));
        bytes.push(s.batch(50, 60).records());
        assert_eq!(bytes.window(20, 60), direct(20, 60));
        bytes.forget_below(1_000);
        assert_eq!(bytes.len(), 0, "never past the end");
        assert_eq!(bytes.window(60, 60), 0);
    }
}
