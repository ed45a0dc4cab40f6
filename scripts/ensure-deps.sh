#!/usr/bin/env bash
# Sourced by demo.sh and test.sh: makes sure the machine can build Tidemark, installing what is
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

tidemark_has_libclang() {
    # bindgen (RocksDB's bindings) loads libclang at build time.
    if [[ -n "${LIBCLANG_PATH:-}" ]] && compgen -G "${LIBCLANG_PATH}/libclang*.so*" >/dev/null; then
        return 0
    fi
    compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null ||
        compgen -G "/usr/lib/x86_64-linux-gnu/libclang*.so*" >/dev/null ||
        compgen -G "/usr/lib/aarch64-linux-gnu/libclang*.so*" >/dev/null ||
        (command -v ldconfig >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q 'libclang.*\.so')
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
