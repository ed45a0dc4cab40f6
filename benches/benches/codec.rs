//! The stored value codec on the lookup path: decoding a format-1 entry (no checksum) against a
//! format-2 entry (CRC-32 verified, tag checked against the applied end), at the value size of
//! the backend benchmarks. Compare the two in one run; absolute times depend on the machine.
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tidemark_benches::{VALUE_SIZE, key, payload};
use tidemark_engine_api::codec;

fn bench_decode(c: &mut Criterion) {
    let key = key(42);
    let value = payload(42);
    let v1 = codec::encode_value_v1(42, &value);
    let v2 = codec::encode_value(&key, 42, &value);
    let mut group = c.benchmark_group(format!("decode-{VALUE_SIZE}B"));
    group.bench_function("format-1", |b| {
        b.iter(|| black_box(codec::decode(black_box(&key), black_box(&v1)).is_ok()))
    });
    group.bench_function("format-2", |b| {
        b.iter(|| black_box(codec::decode_applied(black_box(&key), black_box(&v2), 1_000).is_ok()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::criterion(Duration::from_secs(3));
    targets = bench_decode
}
criterion_main!(benches);
