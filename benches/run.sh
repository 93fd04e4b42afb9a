#!/usr/bin/env bash
# Runs the benchmarks against DATABASE_URL (make bench provides a private cluster) and prints
# Markdown tables; copy them into BENCHMARKS.md with the machine description printed first.
#   benches/run.sh            every benchmark
#   benches/run.sh checks     only those named (login, streams, wake, birth, checks, history)
set -euo pipefail
cd "$(dirname "$0")/.."
wanted=("$@")
want() { [ ${#wanted[@]} -eq 0 ] || [[ " ${wanted[*]} " == *" $1 "* ]]; }
echo "## $(date -u +%Y-%m-%d) on $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr)"
echo
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /CPU: /'
echo
section() { # section NAME TITLE
    want "$1" || return 0
    echo "### $2 (benches/$1.rs)"
    echo
    cargo bench --locked --bench "$1" 2>/dev/null
    echo
}
section login "Logins"
section streams "Event streams"
section wake "Wake-ups"
section birth "A thread for each connection"
section checks "Checks"
section history "The change history (memory)"
