#!/usr/bin/env bash
# The rolling-restart benchmark of streams that resume (issue 35; benches/resume.rs), one
# command: builds this tree's release binary and the baseline's (the code before issue 35, by
# default 8b5fb67, main as this branch last merged it; built once into target/resume-baseline/),
# then runs the same rolling restart on the baseline, on this tree, and on this tree without
# taking the instance out of HAProxy's rotation first (DRAIN=0). Prints the Markdown table for
# BENCHMARKS.md, with the machine first. Needs DATABASE_URL (make bench-resume provides a
# private cluster) and HAProxy.
#   benches/resume.sh                 3,000 streams, 50 changes a second
#   STREAMS=300 benches/resume.sh     a small run
#   BASELINE=<commit> benches/resume.sh
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?set DATABASE_URL (make bench-resume does)}"
baseline=${BASELINE:-8b5fb67}
echo "## $(date -u +%Y-%m-%d) on $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /CPU: /'
echo
cargo build --release --locked --bins --benches >&2
dir=target/resume-baseline
bin="$dir/consoled-$baseline"
if [ ! -x "$bin" ]; then
    echo "resume.sh: building the baseline $baseline into $dir" >&2
    rm -rf "$dir/src"
    mkdir -p "$dir/src"
    git archive "$baseline" | tar -x -C "$dir/src"
    (cd "$dir/src" && CARGO_TARGET_DIR=../target cargo build --release --locked --bin consoled >&2)
    cp "$dir/target/release/consoled" "$bin"
fi
short=$(git rev-parse --short "$baseline")
here=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src migrations || echo "+changes")
LABEL="before (main at $short)" CONSOLED_BIN="$bin" cargo bench --locked --bench resume
HEADER=0 LABEL="this tree ($here)" CONSOLED_BIN=target/release/consoled cargo bench --locked --bench resume
HEADER=0 DRAIN=0 LABEL="this tree, no drain" CONSOLED_BIN=target/release/consoled cargo bench --locked --bench resume
