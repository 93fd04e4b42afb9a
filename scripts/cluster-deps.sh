#!/usr/bin/env bash
# Makes sure Debian's PgBouncer and HAProxy are installed, for tests/pgbouncer.rs and
# tests/cluster.rs (both skip with a printed reason when this fails). As root it installs them
# with apt-get (one `apt-get update` first when no candidate is known); otherwise it says what to
# run. Only the binaries are used: the tests start their own private processes on loopback ports,
# and the packaged services are stopped and disabled so that nothing listens on the default ports.
set -euo pipefail

log() { echo "cluster-deps: $*" >&2; }

have() { command -v pgbouncer >/dev/null 2>&1 && command -v haproxy >/dev/null 2>&1; }

if have; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    log "pgbouncer or haproxy is missing; run 'sudo apt-get install pgbouncer haproxy'"
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
policy=$(apt-cache policy pgbouncer 2>/dev/null || true)
updated=no
if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
    log "apt-get update (no pgbouncer candidate known yet)"
    apt-get update -qq >&2
    updated=yes
fi
install() { apt-get install -y -qq --no-install-recommends pgbouncer haproxy >&2; }
log "installing Debian's pgbouncer and haproxy (apt-get)"
if ! install; then
    [ "$updated" = yes ] && exit 1
    log "apt-get update, then retrying"
    apt-get update -qq >&2
    install
fi
# The packaged services are not ours: stop them if the package started them.
for s in pgbouncer haproxy; do
    if command -v systemctl >/dev/null 2>&1; then systemctl disable --now "$s" >/dev/null 2>&1 || true; fi
    if [ -x "/etc/init.d/$s" ]; then "/etc/init.d/$s" stop >/dev/null 2>&1 || true; fi
done
have || { log "pgbouncer or haproxy still missing after apt-get"; exit 1; }
log "installed $(pgbouncer --version 2>/dev/null | head -1) and $(haproxy -v 2>/dev/null | head -1)"
