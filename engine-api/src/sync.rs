//! The one lock policy of the workspace: a poisoned lock is [`Error::Poisoned`] on every
//! fallible path.
//!
//! A panic while a lock is held may leave the state it guards half-updated (a watermark planned
//! but not published, a sweep report half-assembled). Guessing is worse than refusing, so every
//! call that returns a `Result` acquires its locks through these helpers. Paths that cannot return
//! an error (a `Drop`, a plain getter) may read through poisoning, but never write through it.
//!
//! One exception, the same everywhere: a lock whose every critical section is a single operation
//! on a standard collection (a registry map insert or remove) can never be left half-updated, so
//! it is recovered rather than refused (the reclaim scheduler's registry, sled's open-store
//! registry, the memory lake's table).

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Error, Result};

/// Locks `mutex`, or [`Error::Poisoned`] naming `what`.
pub fn lock<'a, T>(mutex: &'a Mutex<T>, what: &'static str) -> Result<MutexGuard<'a, T>> {
    mutex.lock().map_err(|_| Error::Poisoned { what })
}

/// Locks `mutex` through poisoning: only for the exception above (a lock whose every critical
/// section is one operation that cannot leave its state half-updated), and for paths that have
/// nobody to return an error to (a `Drop`, a background thread) and only read or set flags.
pub fn lock_recovered<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Read-locks `lock`, or [`Error::Poisoned`] naming `what`.
pub fn read<'a, T>(lock: &'a RwLock<T>, what: &'static str) -> Result<RwLockReadGuard<'a, T>> {
    lock.read().map_err(|_| Error::Poisoned { what })
}

/// Write-locks `lock`, or [`Error::Poisoned`] naming `what`.
pub fn write<'a, T>(lock: &'a RwLock<T>, what: &'static str) -> Result<RwLockWriteGuard<'a, T>> {
    lock.write().map_err(|_| Error::Poisoned { what })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisoned_locks_are_refused_by_name() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let m = std::sync::Arc::clone(&mutex);
        let _ = std::thread::spawn(move || {
            let _guard = m.lock();
            panic!("poison it");
        })
        .join();
        let err = lock(&mutex, "writer").err();
        assert!(
            matches!(err, Some(Error::Poisoned { what: "writer" })),
            "{err:?}"
        );
        let rw = RwLock::new(0);
        assert_eq!(*read(&rw, "state").map(|g| *g).as_ref().unwrap_or(&-1), 0);
        assert!(write(&rw, "state").is_ok());
    }
}
