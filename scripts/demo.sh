#!/usr/bin/env bash
# Runs the side-by-side backend demo: every compiled-in backend ingests the same stream while the
# lake trails it, reclaims incrementally, and prints what it kept and removed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-deps.sh
# The dev profile builds dependencies optimised and shares the RocksDB build with the tests.
cargo run -p tidemark -- demo "$@"
