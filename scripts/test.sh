#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, clippy with warnings denied, every
# criterion benchmark once in test mode, then all tests of all crates with every backend compiled
# in, and a one-line total at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-deps.sh
source scripts/lake-servers.sh

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

# The workspace build above has the test hooks on (the conformance crate enables the `testing`
# features); what users build has them off, which changes code (the test hooks, the fault layer
# and the lake's fault points are compiled out).
# The operator's binary has no `compare`; the one `compare.sh` runs has it.
echo "== cargo clippy of the library and binaries users build (test hooks off)"
cargo clippy -p tidemark -p tidemark-compare -p tidemark-cli --lib --bins -- -D warnings
cargo clippy -p tidemark-cli --bins --features compare -- -D warnings

echo "== the operator's binary without compare: no plotting or harness crates, and its compare refused"
if cargo tree -p tidemark-cli -e normal --prefix none | grep -E '^(plotters|tidemark-compare|tidemark-test-support) '; then
    echo "tidemark-cli links the benchmark harness without its compare feature" >&2
    exit 1
fi
cargo test -p tidemark-cli --test cli compare_absent

echo "== cargo doc (broken or private links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --quiet

log=$(mktemp)
trap 'rm -f "$log"; tidemark_stop_lake_servers' EXIT

echo "== criterion benchmarks in test mode, each once: that they run, not how fast (the first build compiles RocksDB: several minutes)"
set +e
cargo test -p tidemark-benches --bench backends --bench codec 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
echo "benchmarks run once: $(grep -c '^Success' "$log" || true)"
if [[ $status -ne 0 ]]; then
    exit "$status"
fi

# The Iceberg lake's tests on a shared catalog and object store run against real servers.
echo "== lake servers: PostgreSQL and an S3-protocol server on loopback"
tidemark_start_lake_servers

# --all-features: every backend and the Iceberg lake, and the binary with `compare`, so the
# command-line tests of `tidemark compare` run too.
echo "== cargo test"
set +e
cargo test --workspace --all-features 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i-1); if ($(i) ~ /^failed/) f += $(i-1); if ($(i) ~ /^ignored/) ig += $(i-1) } }
     END { printf "total: %d passed, %d failed\n", p, f }' "$log"
# Tests run in parallel, so a notice can land mid-line in another test's output: count every
# notice, not lines that start with one.
skipped=$({ grep -o 'SKIPPED [A-Za-z0-9_]*::[A-Za-z0-9_]*:' "$log" || true; } | wc -l)
echo "conformance cases skipped for missing backend capabilities: $skipped"
exit "$status"
