#!/usr/bin/env bash
# Makes sure Debian's nginx and HAProxy are installed, for the proxy tests (tests/proxy.rs) that
# `make test` runs. As root it installs the missing ones with apt-get, without starting their
# system services (the test runs its own, on loopback ports); otherwise it says what to run and
# exits 0: the test then prints that it is skipped. Never fails `make test` by itself.
set -uo pipefail

log() { echo "proxy-deps: $*" >&2; }

missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "${missing[*]} missing; 'sudo apt-get install ${missing[*]}' runs the proxy test too"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# Installing must not start the packages' own daemons on ports 80 and 443: invoke-rc.d asks
# policy-rc.d, and 101 means "not now". Only a policy this script wrote is removed again.
policy=/usr/sbin/policy-rc.d
ours=no
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && ours=yes
fi
install() { apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; }
log "installing Debian's ${missing[*]} (apt-get; no service is started)"
if ! install; then
    log "apt-get update, then retrying"
    apt-get update -qq >&2 && install || log "could not install ${missing[*]}; the proxy test will be skipped"
fi
[ "$ours" = yes ] && rm -f "$policy"
exit 0
