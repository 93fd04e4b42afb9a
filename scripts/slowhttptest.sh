#!/usr/bin/env bash
# slowhttptest against a release build of consoled on loopback, with a /healthz probe.
#
#   DATABASE_URL=postgres://... scripts/slowhttptest.sh [H|B|X ...]   (default: H B X)
#
# Each mode opens CONNECTIONS (2,000) connections from 127.0.0.1, RATE (200) per second, for
# LENGTH (60) s; meanwhile curl asks /healthz from another client address (127.0.0.2) every
# 0.2 s, and the script prints how many probes answered 200, their p99 and the slowest. Installs
# Debian's slowhttptest when missing (as root). Results go to target/slowhttptest/.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
: "${DATABASE_URL:?set DATABASE_URL (the database of make test will do)}"
port=${PORT:-18087}
length=${LENGTH:-60}
connections=${CONNECTIONS:-2000}
rate=${RATE:-200}
out="$here/target/slowhttptest"
mkdir -p "$out"

if ! command -v slowhttptest >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || { echo "install slowhttptest (apt-get install slowhttptest)" >&2; exit 1; }
    apt-get update -qq && apt-get install -y -qq slowhttptest >/dev/null
fi
(cd "$here" && cargo build --release -q)

CONSOLED_LISTEN=127.0.0.1:$port CONSOLED_COOKIE_SECURE=false CONSOLED_MAIL_SENDER=false \
    CONSOLED_MAIL_DIR="$out/mail" RUST_LOG=warn "$here/target/release/consoled" 2>"$out/server.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done

probe() { # writes "code seconds" lines until killed
    while :; do
        curl -s -o /dev/null -m 5 --interface 127.0.0.2 -w '%{http_code} %{time_total}\n' \
            "http://127.0.0.1:$port/healthz" || true
        sleep 0.2
    done
}

base="http://127.0.0.1:$port"
for mode in "${@:-H B X}"; do
    for m in $mode; do
        case $m in
        H) args=(-H -i 5 -u "$base/healthz") ;;
        B) args=(-B -i 5 -s 8192 -f application/json -u "$base/auth/login") ;;
        X) args=(-X -k 3 -n 5 -w 512 -y 1024 -z 32 -u "$base/openapi.json") ;;
        *) echo "unknown mode $m" >&2; exit 1 ;;
        esac
        probe >"$out/probe-$m.txt" &
        prober=$!
        echo "== slowhttptest ${args[*]} -c $connections -r $rate -l $length -p 3"
        slowhttptest "${args[@]}" -c "$connections" -r "$rate" -l "$length" -p 3 -g -o "$out/run-$m" >"$out/run-$m.log" 2>&1 || true
        kill $prober; wait $prober 2>/dev/null || true
        grep -E "Test ended|Exit status|service available" "$out/run-$m.log" | tail -3 || true
        tail -1 "$out/run-$m.csv" 2>/dev/null | awk -F, '{print "last sample: seconds="$1" closed="$2" pending="$3" connected="$4" available="$5}'
        sort -k2 -n "$out/probe-$m.txt" | awk '{t[NR] = $2; if ($1 == 200) ok++} END {
            p99 = t[int((NR - 1) * 0.99) + 1]
            printf "healthz probes from 127.0.0.2: %d, 200: %d, p99 %.3f s, slowest %.3f s\n", NR, ok, p99, t[NR]}'
        sleep 12 # let the server time out what is left before the next mode
    done
done
