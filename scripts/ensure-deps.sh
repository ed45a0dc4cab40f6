#!/usr/bin/env bash
# Sourced by compare.sh and test.sh: makes sure the machine can build Tidemark, installing what is
# missing when we are root on a Debian-like system, or stopping with a message saying what to do.
set -euo pipefail

tidemark_die() {
    echo "tidemark setup: $*" >&2
    exit 1
}

tidemark_apt_install() {
    # Installs Debian packages when possible; otherwise explains what is needed.
    local pkgs=("$@")
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "tidemark setup: installing ${pkgs[*]} with apt-get" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null || tidemark_die "apt-get update failed; install ${pkgs[*]} by hand"
        apt-get install -y -qq "${pkgs[@]}" >/dev/null ||
            tidemark_die "apt-get install ${pkgs[*]} failed; install them by hand"
    else
        tidemark_die "missing ${pkgs[*]}: install them (e.g. 'sudo apt-get install ${pkgs[*]}') and rerun"
    fi
}

tidemark_libclang_in() {
    # True when directory $1 holds libclang itself (libclang.so, libclang.so.N, libclang-N.so…).
    # libclang-cpp (preinstalled on some images) is a different library and does not count.
    local f
    for f in "$1"/libclang.so "$1"/libclang.so.* "$1"/libclang-[0-9]*.so*; do
        [[ -e "$f" ]] && return 0
    done
    return 1
}

tidemark_has_libclang() {
    # bindgen (RocksDB's bindings) loads libclang at build time.
    local d
    for d in ${LIBCLANG_PATH:-} /usr/lib/llvm-*/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib; do
        [[ -d "$d" ]] && tidemark_libclang_in "$d" && return 0
    done
    return 1
}

command -v cargo >/dev/null 2>&1 ||
    tidemark_die "cargo not found: install Rust 1.90 or newer with rustup (https://rustup.rs) and rerun"

missing=()
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || missing+=(make)
tidemark_has_libclang || missing+=(libclang-dev)
if ((${#missing[@]} > 0)); then
    tidemark_apt_install "${missing[@]}"
fi
tidemark_has_libclang || tidemark_die "libclang still not found; set LIBCLANG_PATH to the directory holding libclang.so"
