#!/usr/bin/env bash
# Runs `tidemark compare`: every compiled-in backend takes the same continuously written bucket,
# with Tidemark's incremental reclamation and with the designs it replaces, one run at a time;
# prints the figures and writes two SVG charts and compare.json into ./tidemark-compare/.
# Arguments are passed on (e.g. ./scripts/compare.sh --duration 30s --backends redb).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-deps.sh
# The dev profile builds dependencies optimised and shares the RocksDB build with the tests.
cargo run -p tidemark-cli -- compare "$@"
