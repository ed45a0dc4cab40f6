#!/usr/bin/env bash
# Runs `tidemark compare`: every compiled-in backend takes the same continuously written bucket,
# with Tidemark's incremental reclamation and with the designs it replaces, one run at a time;
# prints the figures and writes two SVG charts and compare.json into ./tidemark-compare/.
# Arguments are passed on (e.g. ./scripts/compare.sh --duration 30s --backends redb).
# `--lake iceberg` runs against a real Apache Iceberg table, built with the `iceberg` feature.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-deps.sh
# Library backtraces off unless asked for (RUST_BACKTRACE still gives a panic's): the iceberg crate
# captures one in every error it creates, discarded ones on its read path included, and with
# RUST_BACKTRACE=1 alone every lake lookup of `--lake iceberg` would pay for that.
export RUST_LIB_BACKTRACE="${RUST_LIB_BACKTRACE:-0}"
# The dev profile builds dependencies optimised and shares the RocksDB build with the tests.
# `compare` is in the binary only with its cargo feature `compare` (the operator's build has none).
features=compare
previous=""
for arg in "$@"; do
    if [[ "$arg" == "--lake=iceberg" || ( "$previous" == "--lake" && "$arg" == "iceberg" ) ]]; then
        features=compare,iceberg
    fi
    previous="$arg"
done
cargo run -p tidemark-cli --features "$features" -- compare "$@"
