//! Lake progress and recovery: the two paths that move a bucket's watermark.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::HistoricalBucket;
use super::lake_call::LakeCall;
use super::stats::bump;
use crate::error::{Error, Result};
use crate::lake::LakeSnapshot;
use crate::scheduler::Requested;
use tidemark_engine_api::Engine;
use tidemark_engine_api::WatermarkUpdate;
use tidemark_engine_api::sync;
use tidemark_engine_api::watermark::plan_adopt;

/// What [`HistoricalBucket::on_lake_progress`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Stale or repeated: an older snapshot than the one served, or the served one at an end
    /// that would not move `W`. Nothing was refreshed or published.
    Ignored {
        /// The watermark, unchanged.
        watermark: u64,
    },
    /// The notification was processed.
    Published {
        /// The snapshot published: the caller's own, or a newer one offered meanwhile that
        /// another caller's notification processed in its place (it holds everything the
        /// caller's does).
        snapshot: LakeSnapshot,
        /// Whether the lookuper was refreshed (the snapshot was newer than the one served; not
        /// needed when the served snapshot is repeated to advance a clamped watermark).
        refreshed: bool,
        /// The watermark update (`moved` is false when it was clamped to where it already was).
        update: WatermarkUpdate,
        /// The reclaim request, when the watermark moved and a scheduler is attached.
        reclaim: Option<Requested>,
    },
}

impl HistoricalBucket {
    /// Handles confirmed lake progress: `snapshot` holds every record below its `end_offset`.
    ///
    /// Processed one at a time per bucket. A snapshot newer than the one the lookuper serves
    /// (a larger id) refreshes the lookuper first, even when its end offset equals the last one
    /// (the lake rewrote or compacted its files). *Then*, when the end offset is beyond `W`, the
    /// watermark is advanced (to `min(end_offset, applied end)`), *then* a reclaim is requested.
    /// The snapshot already served, repeated with an end beyond a clamped `W`, advances `W`
    /// again without a refresh. Anything else (an older snapshot, or the served one that would
    /// not move `W`) is ignored and counted.
    ///
    /// A failed refresh, or one that does not complete within
    /// [`LakeTimeouts::refresh`](super::LakeTimeouts::refresh), returns its
    /// [`Error::Lake`] and publishes nothing: `W` and the served
    /// snapshot stay as they were (counted `refresh_failures`). A newer snapshot id that ends
    /// before the served snapshot breaks the lake's commit order and is refused with
    /// [`Error::Lake`], changing nothing; one that disagrees so with a
    /// snapshot offered or being processed is processed by its own caller only.
    ///
    /// Notifications that arrive while another is processed coalesce: the next one to run
    /// processes the newest snapshot offered meanwhile (the latest wins), and counts it as
    /// coalesced. Every call gets the outcome of its own snapshot: when the newer snapshot is
    /// published, the call that offered it and the call that processed it both return that
    /// publication ([`Progress::Published::snapshot`] names it); when it fails, its error goes
    /// to the call that offered it, and the processing call goes on with its own snapshot. A
    /// call whose snapshot was replaced in the queue by a newer one processes its own, which
    /// is then usually stale and ignored. Each processed snapshot still goes refresh, then
    /// publish.
    pub async fn on_lake_progress(&self, snapshot: LakeSnapshot) -> Result<Progress> {
        // Counted inside the offer, refused calls included, while the offer is held: once a call
        // is counted, its snapshot can be taken over.
        let mine = self.offer(snapshot)?;
        let _serial = self.progress.lock().await;
        if let Some(outcome) = mine.take()? {
            // A holder before us processed our snapshot (as the newest offered) and left its
            // outcome here.
            return outcome;
        }
        let taken = sync::lock(&self.queue, "bucket offered snapshot")?
            .offered
            .take();
        if let Some(newer) = taken
            && newer.snapshot.id > snapshot.id
        {
            bump(&self.counters.coalesced_notifications);
            match self.publish(newer.snapshot).await {
                Ok(progress) => {
                    // The newer snapshot holds ours: both calls are answered by its publication.
                    newer.outcome.deliver(Ok(progress))?;
                    return Ok(progress);
                }
                // Its error is its caller's; ours is still to be processed.
                Err(e) => newer.outcome.deliver(Err(e))?,
            }
        }
        // Our own snapshot (an offer older than ours, taken here, is processed by its caller).
        self.publish(snapshot).await
    }

    /// Steps 1–4 of [`on_lake_progress`](Self::on_lake_progress) for one snapshot, under the
    /// progress lock.
    async fn publish(&self, snapshot: LakeSnapshot) -> Result<Progress> {
        sync::lock(&self.queue, "bucket offered snapshot")?.in_flight = Some(snapshot);
        // Cleared also when the caller drops this future midway.
        let _in_flight = InFlight(&self.queue);
        self.publish_in_flight(snapshot).await
    }

    async fn publish_in_flight(&self, snapshot: LakeSnapshot) -> Result<Progress> {
        let LakeSnapshot {
            id: snapshot_id,
            end_offset,
        } = snapshot;
        let watermark = self.engine.watermark();
        let served = self.served()?;
        let newer = snapshot_id > served.id;
        if newer && end_offset < served.end_offset {
            bump(&self.counters.ignored_notifications);
            return Err(out_of_order(snapshot, served));
        }
        // Without a refresh, only an end the lookuper already covers may move W.
        let advances_served = end_offset > watermark && end_offset <= served.end_offset;
        if !newer && !advances_served {
            bump(&self.counters.ignored_notifications);
            tracing::debug!(
                snapshot_id,
                end_offset,
                served_id = served.id,
                watermark,
                "stale lake progress ignored"
            );
            return Ok(Progress::Ignored { watermark });
        }
        if newer {
            self.refresh(snapshot).await?;
        }
        let update = if end_offset > watermark {
            self.blocking(move |engine| engine.advance_watermark(end_offset))
                .await?
        } else {
            WatermarkUpdate::unchanged(watermark, end_offset)
        };
        let reclaim = if update.moved {
            bump(&self.counters.watermark_advances);
            self.request_reclaim()
        } else {
            None
        };
        tracing::debug!(
            snapshot_id,
            end_offset,
            previous = update.previous,
            watermark = update.current,
            refreshed = newer,
            "lake progress published"
        );
        Ok(Progress::Published {
            snapshot,
            refreshed: newer,
            update,
            reclaim,
        })
    }

    /// Recovers on open or on becoming leader, before serving: refreshes the lookuper to the
    /// committed lake snapshot, sets `W = max(persisted W, committed end)` and returns the
    /// offset from which the host replays its WAL, `max(W, applied end)`.
    ///
    /// Raising `W` above the applied end (a lagging replica) is allowed here and only here
    /// ([`Engine::adopt_lake_watermark`]): the lake holds those records. The local entries of
    /// such a replica may be older than the lake's versions of the same keys, so every one below
    /// `W` is physically removed with [`Engine::reclaim_below`] (the retention distance does not
    /// keep them) and flushed before this returns, so no later bucket over this engine, after
    /// any restart, can serve them. The decision compares `W` with the applied end, not whether
    /// `W` moved now: a recovery interrupted between the durable adopt and the purge left `W`
    /// above the applied end, and the next recovery purges again. Lookups stop trusting those
    /// entries before `W` is raised.
    ///
    /// A committed snapshot older than the persisted watermark never lowers it; the lookuper is
    /// refreshed to it, and local misses are refused until lake progress reaches `W` again.
    /// A failed or timed-out refresh returns its error and changes nothing.
    pub async fn recover(&self, committed: LakeSnapshot) -> Result<u64> {
        let _serial = self.progress.lock().await;
        let served = self.served()?;
        // Never move the lookuper backwards (a second recovery of a live bucket).
        if committed.id > served.id {
            if committed.end_offset < served.end_offset {
                return Err(out_of_order(committed, served));
            }
            self.refresh(committed).await?;
        }
        // What this replica applied itself (adopting does not move it; the host applies nothing
        // before it has the replay offset this returns).
        let applied_end = self.engine.applied_end();
        let target = plan_adopt(self.engine.watermark(), committed.end_offset).current;
        if target > applied_end {
            // Before W moves, so no lookup sees the adopted W and still trusts an entry below it.
            self.stale_below.fetch_max(target, Ordering::SeqCst);
        }
        let update = self
            .blocking(move |engine| engine.adopt_lake_watermark(committed.end_offset))
            .await?;
        let watermark = update.current;
        if watermark > applied_end {
            self.stale_below.fetch_max(watermark, Ordering::SeqCst);
            let report = self
                .blocking(move |engine| {
                    let report = engine.reclaim_below(watermark)?;
                    engine.flush()?;
                    Ok(report)
                })
                .await?;
            tracing::info!(
                watermark,
                applied_end,
                removed = report.removed(),
                "lagging replica adopted the lake end; every local entry below it removed"
            );
        }
        if committed.end_offset < watermark {
            tracing::warn!(
                committed = committed.end_offset,
                watermark,
                "committed lake snapshot is older than the persisted watermark; lake fallbacks \
                 are refused until lake progress reaches the watermark"
            );
        }
        if update.moved {
            bump(&self.counters.watermark_advances);
            self.request_reclaim();
        }
        bump(&self.counters.recoveries);
        let replay_from = watermark.max(applied_end);
        tracing::info!(
            snapshot_id = committed.id,
            lake_end = committed.end_offset,
            previous = update.previous,
            watermark,
            applied_end,
            replay_from,
            "bucket recovered"
        );
        Ok(replay_from)
    }

    /// Checks `snapshot` against the served one and offers it to whoever processes lake
    /// progress next, unless a newer one is offered or it disagrees with the one offered or
    /// being processed. Returns the slot its outcome arrives in when another caller processes
    /// it.
    ///
    /// A snapshot whose id is newer than the served one but whose end is earlier breaks the
    /// lake's commit order: it is refused here, before it joins the queue. One that disagrees
    /// the same way with a snapshot offered or being processed (neither refreshed yet, so
    /// either may be the wrong one) does not join the queue either: its own caller processes
    /// it, against whatever is served then, so no other caller takes it over and fails with
    /// its error or succeeds in its name.
    fn offer(&self, snapshot: LakeSnapshot) -> Result<OutcomeSlot> {
        let mut queue = sync::lock(&self.queue, "bucket offered snapshot")?;
        bump(&self.counters.notifications);
        let served = self.served()?;
        if snapshot.id > served.id && snapshot.end_offset < served.end_offset {
            drop(queue);
            bump(&self.counters.ignored_notifications);
            return Err(out_of_order(snapshot, served));
        }
        let disagrees = [queue.in_flight, queue.offered.as_ref().map(|o| o.snapshot)]
            .into_iter()
            .flatten()
            .any(|k| snapshot.id > k.id && snapshot.end_offset < k.end_offset);
        let slot = OutcomeSlot::default();
        if !disagrees
            && queue
                .offered
                .as_ref()
                .is_none_or(|o| snapshot.id > o.snapshot.id)
        {
            queue.offered = Some(Offer {
                snapshot,
                outcome: slot.clone(),
            });
        }
        Ok(slot)
    }

    /// Refreshes the lookuper and, only on success, records the end it now serves.
    async fn refresh(&self, snapshot: LakeSnapshot) -> Result<()> {
        let what = || {
            format!(
                "the lake refresh to snapshot {} (ending at {})",
                snapshot.id, snapshot.end_offset
            )
        };
        match self
            .lake_call(LakeCall::Refresh, what, self.lake.refresh(snapshot))
            .await
        {
            Ok(()) => {
                bump(&self.counters.refreshes);
                self.set_served(snapshot)
            }
            Err(e) => {
                bump(&self.counters.refresh_failures);
                tracing::warn!(
                    snapshot_id = snapshot.id,
                    end_offset = snapshot.end_offset,
                    error = %e,
                    "lake refresh failed; nothing published"
                );
                Err(e)
            }
        }
    }

    fn request_reclaim(&self) -> Option<Requested> {
        let reclaim = self.reclaim.as_ref()?;
        match reclaim.scheduler.request(reclaim.id) {
            Ok(requested) => {
                bump(&self.counters.reclaim_requests);
                Some(requested)
            }
            Err(e) => {
                tracing::warn!(bucket = %reclaim.id, error = %e, "reclaim request refused");
                None
            }
        }
    }
}

/// Lake-progress notifications waiting to be processed, and the one being processed.
#[derive(Debug, Default)]
pub(super) struct ProgressQueue {
    /// The newest snapshot offered by a call still waiting for the progress lock: the next
    /// holder processes it instead of its own older one, so a storm of notifications costs one
    /// watermark write per holder rather than one per notification.
    offered: Option<Offer>,
    /// The snapshot a holder is processing now (checked by new offers like the served one).
    in_flight: Option<LakeSnapshot>,
}

/// Clears the snapshot being processed when its processing ends, however it ends.
struct InFlight<'a>(&'a Mutex<ProgressQueue>);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // A drop cannot refuse: clearing a copied value through poisoning is safe.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .in_flight = None;
    }
}

/// A snapshot offered by a waiting call, with the slot its outcome goes to when another call
/// processes it.
#[derive(Debug)]
struct Offer {
    snapshot: LakeSnapshot,
    outcome: OutcomeSlot,
}

/// Where the outcome of a call's snapshot is left when another call processed it.
#[derive(Debug, Clone, Default)]
struct OutcomeSlot(Arc<Mutex<Option<Result<Progress>>>>);

impl OutcomeSlot {
    fn deliver(&self, outcome: Result<Progress>) -> Result<()> {
        *sync::lock(&self.0, "bucket progress outcome")? = Some(outcome);
        Ok(())
    }

    fn take(&self) -> Result<Option<Result<Progress>>> {
        Ok(sync::lock(&self.0, "bucket progress outcome")?.take())
    }
}

/// The error for a snapshot whose id is newer than the served one but whose end is older: the
/// lake's ids are its commit order, and a later commit never ends earlier.
fn out_of_order(snapshot: LakeSnapshot, served: LakeSnapshot) -> Error {
    tracing::warn!(
        snapshot_id = snapshot.id,
        end_offset = snapshot.end_offset,
        served_id = served.id,
        served_end = served.end_offset,
        "lake snapshot ids and end offsets disagree; nothing changed"
    );
    Error::lake(format!(
        "lake snapshot {} ends at {}, before the served snapshot {} (ending at {}): snapshot ids \
         must follow the lake's commit order, whose end offsets never decrease",
        snapshot.id, snapshot.end_offset, served.id, served.end_offset
    ))
}
