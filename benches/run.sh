#!/usr/bin/env bash
# Runs every benchmark against DATABASE_URL (make bench provides a private cluster) and prints
# Markdown tables; copy them into BENCHMARKS.md with the machine description printed first.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "## $(date -u +%Y-%m-%d) on $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr)"
echo
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /CPU: /'
echo
echo "### Logins (benches/login.rs)"
echo
cargo bench --locked --bench login 2>/dev/null
echo
echo "### Event streams (benches/streams.rs)"
echo
cargo bench --locked --bench streams 2>/dev/null
echo
echo "### Wake-ups (benches/wake.rs)"
echo
cargo bench --locked --bench wake 2>/dev/null
