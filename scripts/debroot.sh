#!/usr/bin/env bash
# A clean Debian 12 root for tests/package.rs, made once with debootstrap (minbase) under
# target/debroot/ and kept; the test installs into a copy of it. `make test` starts it first
# thing, in the background, so that its minute or two of downloading overlaps the build.
#
#   scripts/debroot.sh start   install what the test needs (debootstrap, lintian, systemd-analyze;
#                              apt-get as root), then make the root in the background unless made
#   scripts/debroot.sh wait    wait for it (making it now if nothing did); print its path, or
#                              the reason there is none on stderr and exit 1
#
# Packages come from the first bookworm source the host's apt uses (debootstrap's own default
# otherwise). Needs root, as debootstrap and chroot do.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
base="$here/target/debroot"
root="$base/root"
log() { echo "debroot: $*" >&2; }

need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        log "not root: debootstrap and chroot need root"
        exit 1
    fi
}

deps() {
    local missing=()
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    command -v lintian >/dev/null 2>&1 || missing+=(lintian)
    command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
    command -v objdump >/dev/null 2>&1 || missing+=(binutils)
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing Debian's ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    local apt=(apt-get -o DPkg::Lock::Timeout=600 -y -qq)
    "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2 ||
        { "${apt[@]}" update >&2 && "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2; }
}

mirror() {
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk '$1 == "deb" && $3 ~ /^bookworm$/ { print $2; exit }'
    cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
        awk '/^URIs:/ { u = $2 } /^Suites:/ && / bookworm( |$)/ && u !~ /security/ { print u; exit }'
}

make_root() {
    rm -rf "$root.tmp"
    local from
    from=$(mirror | head -n 1)
    if debootstrap --variant=minbase bookworm "$root.tmp" ${from:+"$from"} >"$base/log" 2>&1; then
        mv "$root.tmp" "$root"
    else
        echo "debootstrap failed: $(tail -n 3 "$base/log" | tr '\n' ' ')" >"$base/failed"
    fi
}

running() {
    [ -f "$base/pid" ] && kill -0 "$(cat "$base/pid")" 2>/dev/null
}

case "${1:-}" in
start)
    need_root
    deps || { log "could not install the package test's tools; it will say so"; exit 0; }
    mkdir -p "$base"
    if [ -d "$root" ] || running; then exit 0; fi
    rm -f "$base/failed"
    log "making a Debian 12 root in the background (target/debroot/log)"
    (make_root; rm -f "$base/pid") </dev/null >/dev/null 2>&1 &
    echo $! >"$base/pid"
    ;;
wait)
    need_root
    deps >/dev/null 2>&1 || { log "debootstrap or lintian missing and not installable"; exit 1; }
    mkdir -p "$base"
    if [ ! -d "$root" ] && ! running; then
        rm -f "$base/failed"
        make_root
    fi
    # Ten minutes at most: a slow mirror must not hang the test run.
    for _ in $(seq 1 1200); do
        [ -d "$root" ] && break
        running || break
        sleep 0.5
    done
    if [ -d "$root" ]; then
        echo "$root"
    else
        log "$(cat "$base/failed" 2>/dev/null || echo "no root after 10 minutes")"
        exit 1
    fi
    ;;
*)
    echo "usage: debroot.sh start|wait" >&2
    exit 2
    ;;
esac
