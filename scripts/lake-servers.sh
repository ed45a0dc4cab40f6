#!/usr/bin/env bash
# Sourced by test.sh (and usable by hand: `source scripts/lake-servers.sh; tidemark_start_lake_servers`):
# starts what the Iceberg lake's shared-catalog tests run against, on loopback, in a temporary
# directory: a PostgreSQL server (Debian's `postgresql`, installed when missing as root on a
# Debian-like system; otherwise it says what to do) for the catalog, and an S3-protocol object
# store for the warehouse: `s3s-fs`'s filesystem-backed S3 service from crates.io, served by the
# workspace's `tidemark-lake-s3-server` (built here; see its src/main.rs for why not s3s-fs's own
# binary). Exports where the tests find them:
#   TIDEMARK_TEST_POSTGRES_URL   postgres://tidemark@127.0.0.1:<port>/postgres
#   TIDEMARK_TEST_S3_ENDPOINT    http://127.0.0.1:<port>
#   TIDEMARK_TEST_S3_BUCKET      a bucket that exists
#   TIDEMARK_TEST_S3_ACCESS_KEY, TIDEMARK_TEST_S3_SECRET_KEY
#   TIDEMARK_TEST_S3_ROOT        the server's directory (tests that damage objects use it)
# Both run until `tidemark_stop_lake_servers`, which also removes the directory.

tidemark_lake_die() {
    echo "tidemark lake servers: $*" >&2
    exit 1
}

tidemark_free_port() {
    # A loopback port nothing listens on now (a server that then loses it fails to start, and
    # the caller tries another).
    local port
    while true; do
        port=$((20000 + RANDOM % 30000))
        if ! (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
}

tidemark_wait_for_port() {
    # Waits up to 30 s for something to listen on 127.0.0.1:$1 while process $2 lives.
    local i
    for ((i = 0; i < 300; i++)); do
        if (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
            return 0
        fi
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

tidemark_postgres_bin() {
    # The newest installed PostgreSQL server's bin directory, if any.
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" ]] && echo "$d"
}

tidemark_ensure_postgres() {
    if [[ -z "$(tidemark_postgres_bin)" ]]; then
        tidemark_apt_install postgresql
    fi
    [[ -n "$(tidemark_postgres_bin)" ]] ||
        tidemark_lake_die "PostgreSQL's initdb not found under /usr/lib/postgresql/*/bin; install the server (Debian: postgresql)"
}

tidemark_build_s3_server() {
    # The workspace's S3 server (shares the test build's dependencies).
    # Cargo says where it put the executable (whatever the target directory or triple).
    TIDEMARK_S3_SERVER=$(cargo build --quiet -p tidemark-lake-s3-server --message-format=json-render-diagnostics |
        sed -n 's/.*"executable":"\([^"]*tidemark-lake-s3-server\)".*/\1/p' | tail -n 1) ||
        tidemark_lake_die "cannot build the S3 test server (cargo build -p tidemark-lake-s3-server)"
    [[ -x "$TIDEMARK_S3_SERVER" ]] || tidemark_lake_die "the S3 test server was built but $TIDEMARK_S3_SERVER is missing"
}

# As root the server runs as Debian's `postgres` user, which refuses to run as root.
tidemark_as_postgres() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

tidemark_start_postgres() {
    local bin dir port attempt
    bin=$(tidemark_postgres_bin)
    dir="$TIDEMARK_LAKE_SERVERS_DIR/postgres"
    mkdir -p "$dir"
    if [[ $(id -u) -eq 0 ]]; then
        id postgres >/dev/null 2>&1 ||
            tidemark_lake_die "PostgreSQL refuses to run as root, and there is no 'postgres' user to run it as (Debian's postgresql package creates one)"
        chown postgres: "$dir"
    fi
    tidemark_as_postgres "$bin/initdb" --pgdata="$dir/data" --username=tidemark --auth=trust \
        --no-sync --no-instructions >"$TIDEMARK_LAKE_SERVERS_DIR/initdb.log" 2>&1 ||
        tidemark_lake_die "initdb failed: $(tail -n 5 "$TIDEMARK_LAKE_SERVERS_DIR/initdb.log")"
    # Set before any start, so that the stop stops a server whatever became of its start.
    TIDEMARK_POSTGRES_BIN="$bin"
    for attempt in 1 2 3 4 5; do
        port=$(tidemark_free_port)
        # Test data only: fsync off. Enough connections for every test's pool at once.
        if tidemark_as_postgres "$bin/pg_ctl" --pgdata="$dir/data" --wait --timeout=60 \
            --log="$dir/server.log" \
            -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=off -c max_connections=400" \
            start >/dev/null 2>&1; then
            export TIDEMARK_TEST_POSTGRES_URL="postgres://tidemark@127.0.0.1:$port/postgres"
            return
        fi
        # A start that timed out may have left a server running: stop it before the next port.
        tidemark_as_postgres "$bin/pg_ctl" --pgdata="$dir/data" --mode=immediate stop >/dev/null 2>&1 || true
    done
    tidemark_lake_die "PostgreSQL did not start: $(tail -n 5 "$dir/server.log" 2>/dev/null)"
}

tidemark_start_s3() {
    local root port attempt
    root="$TIDEMARK_LAKE_SERVERS_DIR/s3"
    # A bucket is a directory of the server's root.
    mkdir -p "$root/tidemark"
    for attempt in 1 2 3 4 5; do
        port=$(tidemark_free_port)
        # The server exits at once when another process took the port meanwhile; the wait below
        # then fails on its death, not on the other process's port.
        "$TIDEMARK_S3_SERVER" --host 127.0.0.1 --port "$port" --access-key tidemark --secret-key tidemark-secret \
            "$root" >"$TIDEMARK_LAKE_SERVERS_DIR/s3.log" 2>&1 &
        TIDEMARK_S3_PID=$!
        if tidemark_wait_for_port "$port" "$TIDEMARK_S3_PID" && kill -0 "$TIDEMARK_S3_PID" 2>/dev/null; then
            export TIDEMARK_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
            export TIDEMARK_TEST_S3_BUCKET=tidemark
            export TIDEMARK_TEST_S3_ACCESS_KEY=tidemark
            export TIDEMARK_TEST_S3_SECRET_KEY=tidemark-secret
            export TIDEMARK_TEST_S3_ROOT="$root"
            return
        fi
        kill "$TIDEMARK_S3_PID" 2>/dev/null || true
        wait "$TIDEMARK_S3_PID" 2>/dev/null || true
    done
    tidemark_lake_die "the S3 test server did not start: $(tail -n 5 "$TIDEMARK_LAKE_SERVERS_DIR/s3.log")"
}

tidemark_start_lake_servers() {
    tidemark_ensure_postgres
    tidemark_build_s3_server
    TIDEMARK_LAKE_SERVERS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-lake-servers.XXXXXX")
    # The server's user must reach its directory below ours.
    chmod 755 "$TIDEMARK_LAKE_SERVERS_DIR"
    tidemark_start_postgres
    tidemark_start_s3
    echo "lake servers: PostgreSQL at ${TIDEMARK_TEST_POSTGRES_URL#postgres://}, S3 at $TIDEMARK_TEST_S3_ENDPOINT"
}

tidemark_stop_lake_servers() {
    if [[ -n "${TIDEMARK_S3_PID:-}" ]]; then
        kill "$TIDEMARK_S3_PID" 2>/dev/null || true
        wait "$TIDEMARK_S3_PID" 2>/dev/null || true
    fi
    if [[ -n "${TIDEMARK_POSTGRES_BIN:-}" ]]; then
        tidemark_as_postgres "$TIDEMARK_POSTGRES_BIN/pg_ctl" --pgdata="$TIDEMARK_LAKE_SERVERS_DIR/postgres/data" \
            --mode=immediate stop >/dev/null 2>&1 || true
    fi
    if [[ -n "${TIDEMARK_LAKE_SERVERS_DIR:-}" ]]; then
        rm -rf "$TIDEMARK_LAKE_SERVERS_DIR"
    fi
}
