//! Containing panics of a storage engine on damaged files.
//!
//! Some engines panic instead of returning an error when their own files are damaged (redb
//! unwraps the UTF-8 of a `&str` key it reads back, sled fails to find a page its damaged log
//! names). The disk skeleton runs **every** call into its storage through [`contained`] (or
//! [`catch_panic`]), so such a panic becomes [`Error::Backend`] naming the operation and the panic
//! message: the caller gets an error instead of a panic unwinding through it (and through the
//! locks it holds). A panic in a call that may write also fails the store
//! ([`Error::StoreFailed`]); see [`DiskEngine`](crate::DiskEngine).
//!
//! A contained panic still runs the process's panic hook, which by default prints the message
//! and a backtrace note on stderr, once per panic. A host (or a tool such as the `tidemark`
//! command) that would rather report them itself calls [`quiet_contained_panics`] once: from
//! then on a panic raised inside [`contained`] on the thread running it prints nothing (its
//! message and location are in the error, and [`contained_panics`] counts them), and every
//! other panic goes to the hook that was installed before. The library never installs the hook
//! by itself: the process's panic hook belongs to the host.
//!
//! Containment needs the default `panic = "unwind"`; with `panic = "abort"` a panic ends the
//! process wherever it happens.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

use tidemark_engine_api::{Error, Result};

thread_local! {
    /// How many [`catch_panic`] calls are running on this thread (they may nest): the quiet hook
    /// stays silent while it is above zero.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Where the last panic the quiet hook silenced on this thread was raised, for the error
    /// that reports it (the payload does not carry it).
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Panics contained in this process so far.
static COUNT: AtomicU64 = AtomicU64::new(0);
/// The first of them, as its error reads.
static FIRST: OnceLock<String> = OnceLock::new();
/// Installs the quiet hook once, however many times [`quiet_contained_panics`] is called.
static QUIET: Once = Once::new();

/// Runs `f`; a panic inside it is returned as [`Error::Backend`] of `backend` saying that the
/// engine panicked during `operation`, most likely on a damaged file. `f`'s own result passes
/// through.
///
/// Unwind safety is asserted: what a panic leaves half-done belongs to the engine that panicked.
/// A caller that cannot rule that out for a write fails the store ([`catch_panic`] tells a panic
/// from an error `f` returned).
pub fn contained<T>(
    backend: &'static str,
    operation: &str,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    catch_panic(backend, operation, f).and_then(|result| result)
}

/// Runs `f`: `Ok` with whatever it returned, or, when it panicked, the [`Error::Backend`] that
/// [`contained`] would return. Lets a caller treat a panic differently from an error `f`
/// returned (a panic in a write fails the store).
pub fn catch_panic<T>(backend: &'static str, operation: &str, f: impl FnOnce() -> T) -> Result<T> {
    let depth = Depth::enter();
    let caught = catch_unwind(AssertUnwindSafe(f));
    drop(depth);
    caught.map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        let location = LOCATION
            .try_with(|l| l.try_borrow_mut().ok().and_then(|mut l| l.take()))
            .ok()
            .flatten()
            .map(|at| format!(" (at {at})"))
            .unwrap_or_default();
        let text = format!(
            "the storage engine panicked during {operation} (its files are probably damaged): \
             {message}{location}"
        );
        COUNT.fetch_add(1, Ordering::Relaxed);
        let _ = FIRST.set(format!("{backend}: {text}"));
        Error::backend(backend, text)
    })
}

/// Marks the current thread as inside [`catch_panic`] for as long as it lives.
struct Depth;

impl Depth {
    fn enter() -> Self {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_add(1)));
        Depth
    }
}

impl Drop for Depth {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Whether the current thread is running inside [`contained`].
fn inside_contained() -> bool {
    DEPTH.try_with(|d| d.get() > 0).unwrap_or(false)
}

/// Installs, once per process, a panic hook that prints nothing for a panic raised inside
/// [`contained`] on the panicking thread (the error it returns carries the message and, with this
/// hook, the location) and hands every other panic to the hook installed before it.
///
/// Opt-in, for hosts and tools that report the errors themselves: without it every contained
/// panic still prints through the process's hook (the default one prints the message and a
/// backtrace note on stderr each time, which a damaged store can make thousands of). Call it once
/// at startup, after installing any panic hook of your own (it forwards to that one). Later calls
/// do nothing.
///
/// ```
/// use tidemark_disk::contain::{contained, contained_panics, quiet_contained_panics};
///
/// quiet_contained_panics();
/// // Prints nothing on stderr: the panic is an error naming the operation and the message.
/// let err = contained::<()>("redb", "lookup", || panic!("damaged page")).unwrap_err();
/// assert!(err.to_string().contains("damaged page"));
/// assert!(contained_panics().count >= 1);
/// ```
pub fn quiet_contained_panics() {
    QUIET.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if inside_contained() {
                let at = info.location().map(ToString::to_string);
                let _ = LOCATION.try_with(|l| {
                    if let Ok(mut l) = l.try_borrow_mut() {
                        *l = at;
                    }
                });
                return;
            }
            previous(info);
        }));
    });
}

/// The panics [`contained`] has turned into errors in this process so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainedPanics {
    /// How many.
    pub count: u64,
    /// The first one, as its error reads (backend, operation, message, and its location when
    /// [`quiet_contained_panics`] is installed).
    pub first: Option<String>,
}

/// How many panics [`contained`] has turned into errors in this process so far, and the first
/// of them: what a host that installed [`quiet_contained_panics`] reports once (the `tidemark`
/// command logs it before it exits).
pub fn contained_panics() -> ContainedPanics {
    ContainedPanics {
        count: COUNT.load(Ordering::Relaxed),
        first: FIRST.get().cloned(),
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn a_panic_becomes_a_backend_error_and_results_pass_through() {
        assert_eq!(contained("x", "a read", || Ok(7)).ok(), Some(7));
        assert!(matches!(
            contained::<()>("x", "a read", || Err(Error::Closed)),
            Err(Error::Closed)
        ));
        let before = contained_panics().count;
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
        assert!(contained_panics().count > before);
        assert!(contained_panics().first.is_some());
    }

    #[test]
    fn catch_panic_tells_a_panic_from_an_error() {
        assert!(matches!(
            catch_panic("x", "a write", || Err::<(), _>(Error::Closed)),
            Ok(Err(Error::Closed))
        ));
        assert!(matches!(
            catch_panic("x", "a write", || -> Result<()> { panic!("torn") }),
            Err(Error::Backend { backend: "x", .. })
        ));
        assert!(!inside_contained(), "the depth is restored after a panic");
    }

    /// The environment variable that makes [`the_quiet_hook_silences_only_contained_panics`]
    /// run its child side.
    const QUIET_CHILD: &str = "TIDEMARK_QUIET_HOOK_CHILD";
    const CONTAINED_MARK: &str = "contained-panic-3f9a";
    const FORWARDED_MARK: &str = "forwarded-panic-3f9a";

    /// In a child process (the panic hook is process-wide, and the default hook's output is
    /// what must disappear): with the hook installed, a contained panic prints nothing on
    /// stderr and its error carries the location, while a panic outside `contained` still
    /// reaches the previous (default) hook and prints. Without the hook both print.
    #[test]
    fn the_quiet_hook_silences_only_contained_panics() {
        let name = "contain::tests::the_quiet_hook_silences_only_contained_panics";
        if let Ok(mode) = std::env::var(QUIET_CHILD) {
            if mode == "quiet" {
                quiet_contained_panics();
                quiet_contained_panics(); // a second call changes nothing
            }
            let err = contained::<()>("x", "lookup", || panic!("{CONTAINED_MARK}")).unwrap_err();
            assert!(err.to_string().contains(CONTAINED_MARK), "{err}");
            if mode == "quiet" {
                assert!(err.to_string().contains("contain.rs:"), "{err}");
            }
            let outside = std::panic::catch_unwind(|| panic!("{FORWARDED_MARK}"));
            assert!(outside.is_err());
            return;
        }
        let run = |mode: &str| {
            let output = Command::new(std::env::current_exe().unwrap())
                .args([name, "--exact", "--nocapture", "--test-threads=1"])
                .env(QUIET_CHILD, mode)
                .output()
                .unwrap();
            assert!(output.status.success(), "{output:?}");
            String::from_utf8_lossy(&output.stderr).into_owned()
        };
        let loud = run("default");
        assert!(loud.contains(CONTAINED_MARK), "{loud}");
        assert!(loud.contains(FORWARDED_MARK), "{loud}");
        let quiet = run("quiet");
        assert!(!quiet.contains(CONTAINED_MARK), "{quiet}");
        assert!(quiet.contains(FORWARDED_MARK), "{quiet}");
    }
}
