#!/usr/bin/env bash
# `make bench-compare [QUICK=1]`: builds consoled and the async reference (release), runs the same
# stream ladder against each, back to back on one database, and writes the ratio table and the
# PNG plots. The full run writes into docs/bench-compare/ (what BENCHMARKS.md shows); QUICK=1 into
# benches/out/compare-quick/ (not kept) and takes about a minute once both are built. ROUNDS=N
# repeats the three N times, rotating which goes first (medians and the range of the ratios).
# consoled runs in both delivery modes: the default (the hub writes for idle streams) and the
# column `consoled (CONSOLED_STREAM_DIRECT=false)`. After each ladder a fresh instance gets a
# reconnect storm: STORM streams (default 5,000; 1,000 with QUICK=1; STORM=0 leaves it out) opened
# at once, timed until every one has `ready`. Each also runs the fan-out rungs on a fresh instance
# with a blocking client thread per stream, and beside CPU-bound neighbour processes (issue 38).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -n "${QUICK:-}" ]; then
    out=benches/out/compare-quick
    mode=(--quick)
else
    out=docs/bench-compare
    mode=()
fi
url="${DATABASE_URL:-$(scripts/pg.sh start test "${TEST_PG_PORT:-55433}")}"

# gnuplot draws the PNGs; installed from the distribution when missing (root), else the run
# still prints the table and leaves the plot data and script.
if ! command -v gnuplot >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "bench-compare: installing gnuplot-nox" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox >/dev/null
    else
        echo "bench-compare: gnuplot is missing and cannot be installed here; no PNGs" >&2
    fi
fi

started=$SECONDS
cargo build --release --locked --bin consoled
(cd benches/compare && cargo build --release --locked)
echo "bench-compare: built in $((SECONDS - started)) s" >&2

mkdir -p "$out"
started=$SECONDS
DATABASE_URL="$url" benches/compare/target/release/sseload \
    --consoled target/release/consoled \
    --async-ref benches/compare/target/release/async-ref \
    --out "$out" --rounds "${ROUNDS:-1}" ${STORM:+--storm "$STORM"} "${mode[@]}"
echo "bench-compare: ladder ran in $((SECONDS - started)) s" >&2

if command -v gnuplot >/dev/null; then
    (cd "$out" && gnuplot plots.gp)
    echo "bench-compare: plots in $out/*.png" >&2
fi
