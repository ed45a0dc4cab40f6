//! The value codec with arbitrary stored bytes: the first byte picks a key length, the next that
//! many bytes are the key and the rest the stored value (`tidemark_conformance::hostile_input::check_codec`):
//! decoding never panics, and what decodes is exactly its own encoding. The stable property test
//! `the_codec_accepts_exactly_its_encodings` runs the same check in CI.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&len, rest)) = data.split_first() else {
        return;
    };
    let (key, bytes) = rest.split_at(usize::from(len).min(rest.len()));
    if let Err(problem) = tidemark_conformance::hostile_input::check_codec(key, bytes) {
        panic!("{problem}");
    }
});
