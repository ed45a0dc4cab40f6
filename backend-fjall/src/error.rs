//! Mapping fjall's errors onto [`tidemark_engine_api::Error`].

use tidemark_engine_api::Error;

/// The backend name used in errors, the directory marker and `Engine::backend_name`.
pub const BACKEND: &str = "fjall";

/// Wraps a fjall error as [`Error::Backend`] (an I/O error stays [`Error::Io`]).
pub(crate) fn fjall_err(e: fjall::Error) -> Error {
    match e {
        fjall::Error::Io(io) => Error::Io(io),
        other => Error::backend(BACKEND, other),
    }
}

/// Whether `e` is damage fjall found in what it read (a block whose checksum does not match, or
/// that does not decode), rather than the engine failing.
pub(crate) fn is_damage(e: &fjall::Error) -> bool {
    use fjall::LsmError;
    match e {
        fjall::Error::Storage(inner) => matches!(
            inner,
            LsmError::ChecksumMismatch { .. }
                | LsmError::Decompress(_)
                | LsmError::InvalidTag(_)
                | LsmError::InvalidTrailer
                | LsmError::InvalidHeader(_)
                | LsmError::InvalidVersion(_)
                | LsmError::Utf8(_)
        ),
        fjall::Error::Decompress(_)
        | fjall::Error::InvalidTag(_)
        | fjall::Error::InvalidTrailer => true,
        _ => false,
    }
}

/// The error of a read of `key`: damage is [`Error::Corrupt`] naming the key, like an entry that
/// does not decode; anything else is the engine failing.
pub(crate) fn read_err(key: &[u8], e: fjall::Error) -> Error {
    if is_damage(&e) {
        Error::corrupt(key, format!("fjall read: {e}"))
    } else {
        fjall_err(e)
    }
}
