//! Every call a bucket makes to its lake lookuper is bounded by a host-configured timeout, so a
//! lake that hangs surfaces as an [`Error::Lake`] instead of stalling lookups, or lake progress
//! and recovery (which hold the bucket's progress lock) forever.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use super::HistoricalBucket;
use super::stats::bump;
use crate::error::{Error, Result};

/// How long a [`HistoricalBucket`] waits for each lake lookuper call before giving up with
/// [`Error::Lake`]. `Default` gives the documented defaults; `Duration::MAX` waits forever.
///
/// The timeouts need a tokio runtime with its time driver enabled (`enable_time` or
/// `enable_all`): without it a timed lake call is [`Error::Unsupported`], never a panic; a
/// timeout of `Duration::MAX` uses no timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LakeTimeouts {
    /// Bounds each [`LakeLookuper::refresh`](crate::lake::LakeLookuper::refresh) (lake progress
    /// and recovery). A refresh loads snapshot metadata, so it may take longer than a lookup.
    /// Default 60 s.
    pub refresh: Duration,
    /// Bounds each [`LakeLookuper::lookup`](crate::lake::LakeLookuper::lookup) and
    /// [`LakeLookuper::lookup_many`](crate::lake::LakeLookuper::lookup_many) call (a whole
    /// batch counts as one call). Default 10 s.
    pub lookup: Duration,
}

impl LakeTimeouts {
    /// The default refresh timeout.
    pub const DEFAULT_REFRESH: Duration = Duration::from_secs(60);
    /// The default lookup timeout.
    pub const DEFAULT_LOOKUP: Duration = Duration::from_secs(10);

    /// Sets the refresh timeout.
    pub fn with_refresh(mut self, timeout: Duration) -> Self {
        self.refresh = timeout;
        self
    }

    /// Sets the lookup timeout (`lookup` and `lookup_many`).
    pub fn with_lookup(mut self, timeout: Duration) -> Self {
        self.lookup = timeout;
        self
    }

    /// [`Error::InvalidInput`] for a zero timeout: it would fail every call that has to wait at
    /// all, which is never what a host means (`Duration::MAX` is "no timeout").
    fn validate(&self) -> Result<()> {
        for (name, timeout) in [("refresh", self.refresh), ("lookup", self.lookup)] {
            if timeout.is_zero() {
                return Err(Error::invalid(format!(
                    "the lake {name} timeout must be above zero (Duration::MAX waits forever)"
                )));
            }
        }
        Ok(())
    }
}

impl Default for LakeTimeouts {
    fn default() -> Self {
        LakeTimeouts {
            refresh: Self::DEFAULT_REFRESH,
            lookup: Self::DEFAULT_LOOKUP,
        }
    }
}

/// Which timeout bounds a call.
#[derive(Debug, Clone, Copy)]
pub(super) enum LakeCall {
    Refresh,
    Lookup,
}

impl HistoricalBucket {
    /// Sets the timeouts of this bucket's lake calls (default [`LakeTimeouts::default`]). A zero
    /// timeout is [`Error::InvalidInput`].
    pub fn with_lake_timeouts(mut self, timeouts: LakeTimeouts) -> Result<Self> {
        timeouts.validate()?;
        self.lake_timeouts = timeouts;
        Ok(self)
    }

    /// The timeouts bounding this bucket's lake calls.
    pub fn lake_timeouts(&self) -> LakeTimeouts {
        self.lake_timeouts
    }

    /// Runs one lake call, `what` naming it for the error, within its timeout. A call that
    /// does not finish in time is dropped (a lookuper must keep serving its previous snapshot
    /// when a refresh is dropped, as on error) and is [`Error::Lake`], counted `lake_timeouts`.
    pub(super) async fn lake_call<T>(
        &self,
        call: LakeCall,
        what: impl FnOnce() -> String,
        future: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let timeout = match call {
            LakeCall::Refresh => self.lake_timeouts.refresh,
            LakeCall::Lookup => self.lake_timeouts.lookup,
        };
        if timeout == Duration::MAX {
            // Unbounded: no timer, so this also runs on a runtime without tokio's time driver.
            return future.await;
        }
        // tokio panics when the runtime has no time driver; that is the host's configuration,
        // so it is an error here, not a panic through the host's task.
        let bounded =
            std::panic::catch_unwind(AssertUnwindSafe(|| tokio::time::timeout(timeout, future)))
                .map_err(|_| {
                    Error::Unsupported(
                "lake timeouts need tokio's time driver: build the runtime with `enable_time` \
                 (or `enable_all`), or set both LakeTimeouts to Duration::MAX"
                    .to_string(),
            )
                })?;
        match bounded.await {
            Ok(result) => result,
            Err(elapsed) => {
                bump(&self.counters.lake_timeouts);
                Err(Error::lake_source(
                    format!(
                        "{} did not complete within the lake timeout of {timeout:?}",
                        what()
                    ),
                    elapsed,
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_timeouts_are_refused() {
        assert!(LakeTimeouts::default().validate().is_ok());
        let zero_refresh = LakeTimeouts::default().with_refresh(Duration::ZERO);
        assert!(matches!(
            zero_refresh.validate(),
            Err(Error::InvalidInput(_))
        ));
        let zero_lookup = LakeTimeouts::default().with_lookup(Duration::ZERO);
        assert!(matches!(
            zero_lookup.validate(),
            Err(Error::InvalidInput(_))
        ));
        let forever = LakeTimeouts::default()
            .with_refresh(Duration::MAX)
            .with_lookup(Duration::MAX);
        assert!(forever.validate().is_ok());
    }
}
