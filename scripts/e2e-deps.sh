#!/usr/bin/env bash
# Makes sure Debian's headless chromium and its chromedriver are installed, for `make e2e`.
# As root it installs them with apt-get (one `apt-get update` first); otherwise it says what to run.
set -euo pipefail

log() { echo "e2e-deps: $*" >&2; }

have() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }

# zbarimg (zbar-tools) reads the demo page's QR code back from a screenshot; without it the e2e
# test checks the key as text only. Installed as root when missing; never a reason to fail.
if ! command -v zbarimg >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    log "installing Debian's zbar-tools (apt-get), to decode the demo's QR code"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zbar-tools >&2 \
        || log "zbar-tools not installed; the QR code will not be decoded"
fi

if have; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    log "chromium and chromedriver are missing; run 'sudo apt-get install chromium chromium-driver'"
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
updated=no
# (Captured first: `grep -q` closing the pipe early would fail the pipeline under pipefail.)
policy=$(apt-cache policy chromium 2>/dev/null || true)
if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
    log "apt-get update (no chromium candidate known yet)"
    apt-get update -qq >&2
    updated=yes
fi
install() { apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2; }
log "installing Debian's chromium and chromium-driver (apt-get)"
# A stale package list names versions the mirror no longer has: update once and retry.
if ! install; then
    [ "$updated" = yes ] && exit 1
    log "apt-get update, then retrying"
    apt-get update -qq >&2
    install
fi
have || { log "chromium or chromedriver still missing after apt-get"; exit 1; }
log "installed $(chromium --version 2>/dev/null || echo chromium)"
