//! A reclaim that fails midway under the scheduler: retried with backoff, counted, and never
//! touching what is not covered.

use tidemark_disk::testing::FaultPoint;
use tidemark_engine_api::Engine;

use super::support::{
    BUCKET, Site, Wal, assert_model, fresh_with, progress, runtime, scheduler, write,
};
use crate::EngineFactory;

/// Two injected reclaim failures (each after part of the work): the scheduler retries with
/// backoff and the third attempt completes; its stats count two failures, two retries and one
/// run; every lookup answers the model throughout and nothing covered is left afterwards.
pub fn scheduler_retries_failed_reclaims<F: EngineFactory>(factory: F) {
    let site = Site::new(factory);
    runtime().block_on(async {
        let scheduler = scheduler();
        let (engine, lake, bucket) = fresh_with(&site, Some(&scheduler)).await;
        let wal = Wal::generate(0xFA17, 400, 40, 10);
        write::<F>(&bucket, &lake, &wal, 0, 400).await;
        let faults = site
            .factory()
            .faults(&engine)
            .expect("a backend with Capabilities::faults gives its fault plan");
        faults.fail_next(FaultPoint::Reclaim, 2);
        progress::<F>(&bucket, &lake, 300).await;
        assert_model::<F>(&bucket, &wal, 400, "while the failing reclaims retry").await;
        scheduler.settled(BUCKET).await;
        let stats = scheduler.stats().buckets[&BUCKET];
        assert_eq!(
            (stats.failed, stats.retries, stats.gave_up, stats.runs),
            (2, 2, 0, 1),
            "{}: {stats:?}",
            F::NAME
        );
        assert_eq!(faults.armed(FaultPoint::Reclaim), 0);
        assert_model::<F>(&bucket, &wal, 400, "after the retried reclaim").await;
        let left = engine.reclaimable().unwrap().covered;
        assert_eq!(
            left.entries,
            0,
            "{}: covered entries left: {left:?}",
            F::NAME
        );
        bucket.close().await.unwrap();
        scheduler.shutdown().await;
    });
}
