//! A gate that holds refreshes open until a test releases it, so a "slow refresh" can be made
//! deterministic instead of relying on sleeps.

use tokio::sync::watch;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, Default)]
struct GateState {
    held: bool,
    waiting: usize,
}

/// Callers of [`Gate::pass`] wait while the gate is held; the holder can wait until a given
/// number of them are parked at it.
#[derive(Debug)]
pub(crate) struct Gate {
    tx: watch::Sender<GateState>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            tx: watch::Sender::new(GateState::default()),
        }
    }
}

/// Decrements the waiting count even when the waiting future is dropped half-way.
struct Parked<'a>(&'a watch::Sender<GateState>);

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0
            .send_modify(|s| s.waiting = s.waiting.saturating_sub(1));
    }
}

impl Gate {
    /// Makes later [`Gate::pass`] calls wait.
    pub(crate) fn hold(&self) {
        self.tx.send_modify(|s| s.held = true);
    }

    /// Lets every parked and later caller through.
    pub(crate) fn release(&self) {
        self.tx.send_modify(|s| s.held = false);
    }

    /// How many callers are parked right now.
    pub(crate) fn waiting(&self) -> usize {
        self.tx.borrow().waiting
    }

    /// Returns at once when the gate is open; otherwise parks until it is released.
    pub(crate) async fn pass(&self) -> Result<()> {
        let mut parked = false;
        // Check and register in one step so a concurrent release cannot be missed.
        self.tx.send_if_modified(|s| {
            if s.held {
                s.waiting += 1;
                parked = true;
            }
            parked
        });
        if !parked {
            return Ok(());
        }
        let _parked = Parked(&self.tx);
        let mut rx = self.tx.subscribe();
        rx.wait_for(|s| !s.held)
            .await
            .map(|_| ())
            .map_err(|_| Error::lake("refresh gate dropped"))
    }

    /// Waits until at least `n` callers are parked.
    pub(crate) async fn parked(&self, n: usize) -> Result<()> {
        let mut rx = self.tx.subscribe();
        rx.wait_for(|s| s.waiting >= n)
            .await
            .map(|_| ())
            .map_err(|_| Error::lake("refresh gate dropped"))
    }
}
