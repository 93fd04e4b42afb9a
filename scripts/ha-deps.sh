#!/usr/bin/env bash
# Makes sure Debian's Patroni and etcd are installed, for tests/patroni.rs (skipped, saying why,
# when this fails). As root it installs them with apt-get; the packaged etcd service is stopped
# and disabled, since the test runs its own on free loopback ports.
set -euo pipefail

log() { echo "ha-deps: $*" >&2; }
have() { command -v patroni >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1; }

have && exit 0
if [ "$(id -u)" -ne 0 ]; then
    log "patroni or etcd is missing; run 'sudo apt-get install patroni etcd-server'"
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -o DPkg::Lock::Timeout=600 -y -qq)
log "installing Debian's patroni and etcd-server (apt-get)"
"${apt[@]}" install --no-install-recommends patroni etcd-server >&2 ||
    { "${apt[@]}" update >&2 && "${apt[@]}" install --no-install-recommends patroni etcd-server >&2; }
for s in etcd patroni; do
    if command -v systemctl >/dev/null 2>&1; then systemctl disable --now "$s" >/dev/null 2>&1 || true; fi
    if [ -x "/etc/init.d/$s" ]; then "/etc/init.d/$s" stop >/dev/null 2>&1 || true; fi
done
have || { log "patroni or etcd still missing after apt-get"; exit 1; }
