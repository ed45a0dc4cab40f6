//! Failure and latency injection of one [`MemoryLake`](super::MemoryLake) handle, for tests.
//!
//! This file is the only place that knows whether lake faults exist. With the cargo feature
//! `testing` a handle holds switches that tests set (failing refreshes and lookups, delays, a gate
//! that holds refreshes open); without it [`LakeFaults`] is an empty type whose checks always
//! pass, so the lake's production paths carry no test branches.

#[cfg(not(any(test, feature = "testing")))]
use crate::error::Result;

#[cfg(any(test, feature = "testing"))]
pub(crate) use armed::LakeFaults;

/// Without the `testing` feature: nothing can be injected.
#[cfg(not(any(test, feature = "testing")))]
#[derive(Debug, Default)]
pub(crate) struct LakeFaults;

#[cfg(not(any(test, feature = "testing")))]
impl LakeFaults {
    /// Always `Ok`.
    #[inline(always)]
    pub(crate) async fn before_refresh(&self, snapshot_id: u64) -> Result<()> {
        let _ = snapshot_id;
        Ok(())
    }

    /// Always `Ok`.
    #[inline(always)]
    pub(crate) async fn before_lookup(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(any(test, feature = "testing"))]
mod armed {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Duration;

    use super::super::gate::Gate;
    use crate::error::{Error, Result};

    /// The switches of one handle; all off by default.
    #[derive(Debug, Default)]
    pub(crate) struct LakeFaults {
        /// Refreshes still to fail; `u64::MAX` means every one.
        fail_refreshes: AtomicU64,
        fail_lookups: AtomicBool,
        refresh_delay_nanos: AtomicU64,
        lookup_delay_nanos: AtomicU64,
        gate: Gate,
    }

    impl LakeFaults {
        /// Waits at the gate and for the refresh delay, then fails if a failure is armed.
        pub(crate) async fn before_refresh(&self, snapshot_id: u64) -> Result<()> {
            self.gate.pass().await?;
            sleep_for(&self.refresh_delay_nanos).await;
            let failing = self
                .fail_refreshes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
                    0 => None,
                    u64::MAX => Some(u64::MAX),
                    n => Some(n - 1),
                })
                .is_ok();
            if failing {
                return Err(Error::lake(format!(
                    "injected refresh failure for snapshot {snapshot_id}"
                )));
            }
            Ok(())
        }

        /// Fails if lookups are set to fail, else waits for the lookup delay.
        pub(crate) async fn before_lookup(&self) -> Result<()> {
            if self.fail_lookups.load(Ordering::SeqCst) {
                return Err(Error::lake("injected lookup failure"));
            }
            sleep_for(&self.lookup_delay_nanos).await;
            Ok(())
        }

        pub(crate) fn fail_next_refreshes(&self, n: u64) {
            self.fail_refreshes.store(n, Ordering::SeqCst);
        }

        pub(crate) fn fail_lookups(&self, fail: bool) {
            self.fail_lookups.store(fail, Ordering::SeqCst);
        }

        pub(crate) fn set_refresh_delay(&self, delay: Duration) {
            store_duration(&self.refresh_delay_nanos, delay);
        }

        pub(crate) fn set_lookup_delay(&self, delay: Duration) {
            store_duration(&self.lookup_delay_nanos, delay);
        }

        pub(crate) fn gate(&self) -> &Gate {
            &self.gate
        }
    }

    fn store_duration(slot: &AtomicU64, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        slot.store(nanos, Ordering::SeqCst);
    }

    async fn sleep_for(slot: &AtomicU64) {
        let nanos = slot.load(Ordering::SeqCst);
        if nanos > 0 {
            tokio::time::sleep(Duration::from_nanos(nanos)).await;
        }
    }
}
