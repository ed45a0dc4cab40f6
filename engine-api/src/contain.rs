//! Containing panics of a storage engine reading damaged files.
//!
//! Some engines panic instead of returning an error when their own files are damaged (redb
//! unwraps the UTF-8 of a `&str` key it reads back, for example). The disk skeleton runs the
//! storage calls that read files (open, lookups, reclaims, verify) through [`contained`], so such
//! a panic becomes [`Error::Backend`] naming the operation and the panic message: the caller gets
//! a clear error instead of a panic unwinding through it.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::{Error, Result};

/// Runs `f`; a panic inside it is returned as [`Error::Backend`] of `backend` saying that the
/// engine panicked during `operation`, most likely on a damaged file.
///
/// Unwind safety is asserted: what a panic leaves half-done belongs to the engine that panicked,
/// and the store is meant to be reopened (or restored) after such an error.
pub fn contained<T>(
    backend: &'static str,
    operation: &str,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Err(Error::backend(
                backend,
                format!(
                    "the storage engine panicked during {operation} (its files are probably \
                     damaged): {message}"
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_backend_error_and_results_pass_through() {
        assert_eq!(contained("x", "a read", || Ok(7)).ok(), Some(7));
        assert!(matches!(
            contained::<()>("x", "a read", || Err(Error::Closed)),
            Err(Error::Closed)
        ));
        let err = contained::<()>("redb", "open", || panic!("boom {}", 1)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Backend {
                    backend: "redb",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("boom 1"), "{err}");
        assert!(err.to_string().contains("during open"), "{err}");
    }
}
