//! Process-wide slots created on first use, under the workspace's lock policy
//! ([`tidemark_engine_api::sync`]: a poisoned lock is [`Error::Poisoned`](tidemark_engine_api::Error::Poisoned)).

use std::sync::Mutex;

use tidemark_engine_api::Result;
use tidemark_engine_api::sync::lock;

/// The value in a process-wide `slot`, created by `init` on first use (a failed `init` leaves
/// the slot empty for the next call to try again). The backends' default contexts live in such
/// slots.
pub fn get_or_try_init<T: Clone>(
    slot: &Mutex<Option<T>>,
    what: &'static str,
    init: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let mut slot = lock(slot, what)?;
    if let Some(value) = slot.as_ref() {
        return Ok(value.clone());
    }
    let value = init()?;
    *slot = Some(value.clone());
    Ok(value)
}
