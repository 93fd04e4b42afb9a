#!/usr/bin/env bash
# Makes sure the OpenID Provider that tests/oidc.rs runs is installed: Node.js (18.12 or newer;
# Debian's `nodejs` and `npm` are installed as root when missing) and tests/oidc's pinned npm
# packages (`npm ci` from tests/oidc/package-lock.json into tests/oidc/node_modules; again only
# when the lock file is newer than the installed tree). Never fails `make test` by itself: when
# something cannot be had, it says so, and the test prints that it is skipped (outside CI) or
# fails (CI=true).
set -uo pipefail

log() { echo "oidc-deps: $*" >&2; }
dir="$(cd "$(dirname "$0")/../tests/oidc" && pwd)"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        log "node and npm are missing; 'sudo apt-get install nodejs npm' runs the OpenID Connect test too"
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    install() { apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends nodejs npm >&2; }
    log "installing Debian's nodejs and npm (apt-get)"
    if ! install; then
        apt-get update -qq >&2 && install || { log "could not install nodejs and npm"; exit 0; }
    fi
fi

stamp="$dir/node_modules/.package-lock.json"
if [ -f "$stamp" ] && [ ! "$dir/package-lock.json" -nt "$stamp" ]; then
    exit 0
fi
log "installing the pinned OpenID Provider (npm ci in tests/oidc, $(node --version))"
if ! (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2); then
    log "npm ci failed; the OpenID Connect test cannot run"
fi
exit 0
