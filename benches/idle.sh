#!/usr/bin/env bash
# `make bench-idle`: an idle consoled's resident memory, mapping by mapping (issue 38, item 4;
# BENCHMARKS.md, "Idle memory"). Starts the release binary against DATABASE_URL (make provides a
# private cluster) and prints, from /proc/PID/smaps, what each kind of mapping holds resident:
#   1. idle, fresh (what `make bench-compare` reports as "idle server RSS");
#   2. right after a few logins (each hash thread's argon2 memory);
#   3. after STREAMS streams (default 1,000) were opened at once and closed, the server quiet
#      again;
#   4. once CONSOLED_HASH_MEMORY_KEEP_SECONDS (KEEP, default 5 here) has passed without a hash.
# Needs curl and psql. The async reference's idle figure, for the ratio: REF=1 (built by
# `make bench-compare`, benches/compare/target/release/async-ref).
set -euo pipefail
cd "$(dirname "$0")/.."
url="${DATABASE_URL:?DATABASE_URL}"
streams=${STREAMS:-1000}
keep=${KEEP:-5}
bin=target/release/consoled
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# KiB resident per kind of mapping, from smaps: anonymous mappings by their size (the argon2
# blocks, the 2 MiB stacks of std threads, the 128 KiB ones of connection threads, malloc's
# thread arenas, each a 64 MiB reservation), the main heap, and files by name.
account() { # account PID
    awk '
    /^[0-9a-f]+-[0-9a-f]+ / { name = $6; perm = $2; next }
    /^Size:/ { size = $2 }
    /^Rss:/ {
        kib = $2
        if (name ~ /^\//) { n = split(name, p, "/"); kind = "file " p[n] }
        else if (name == "[heap]") kind = "malloc: main heap"
        else if (name == "[stack]") kind = "main thread stack"
        else if (name != "") kind = "kernel " name
        else if (kib >= 19456) kind = "argon2 blocks (19 MiB per hash thread)"
        else if (size == 2048) kind = "std thread stacks (2 MiB each)"
        else if (size == 128) kind = "connection thread stacks (128 KiB each)"
        else if (size == 8) kind = "std threads signal stacks"
        else if (perm == "rw-p" && size >= 1024) kind = "malloc: thread arenas"
        else kind = "other anonymous"
        rss[kind] += kib; if (kib > 0) used[kind]++
        total += kib
    }
    END {
        for (k in rss) if (rss[k] > 0) printf "%8d KiB  %4d mappings  %s\n", rss[k], used[k], k
        printf "%8d KiB  total (%.1f MiB)\n", total, total / 1024
    }' "/proc/$1/smaps" | sort -k1,1nr
    grep -E "^(RssAnon|RssFile|VmHWM|Threads):" "/proc/$1/status" | tr -s '\t ' ' ' | paste -sd' '
}

cargo build --release --locked --bin consoled >&2
DATABASE_URL="$url" "$bin" migrate >/dev/null
org=$(psql "$url" -Atqc "INSERT INTO organizations (name, kind) VALUES ('bench-idle', 'team') RETURNING id")
project=$(DATABASE_URL="$url" "$bin" project create --org "$org" --name "idle-$$" | sed 's/.*"id":\([0-9]*\).*/\1/')
token=$(DATABASE_URL="$url" "$bin" token create --project "$project" | sed 's/.*"token":"\([^"]*\)".*/\1/')

p=$(port)
addr="127.0.0.1:$p"
DATABASE_URL="$url" CONSOLED_LISTEN="$addr" CONSOLED_COOKIE_SECURE=false \
    CONSOLED_MAIL_DIR="$work/mail" RUST_LOG=warn CONSOLED_HASH_MEMORY_KEEP_SECONDS="$keep" \
    CONSOLED_MAX_STREAMS_PER_PRINCIPAL=1000000 CONSOLED_MAX_STREAMS_PER_INSTANCE=1000000 \
    "$bin" serve 2>"$work/log" &
pid=$!
pids+=("$pid")
until curl -sf "http://$addr/healthz" >/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/log" >&2; exit 1; }
    sleep 0.1
done
sleep 2

echo "## Idle memory, $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r), $(git rev-parse --short HEAD)"
echo
echo "### 1. idle, fresh (pid $pid)"
account "$pid"

curl -s -c "$work/jar" "http://$addr/auth/csrf" >/dev/null
csrf=$(awk '$6 == "svc_csrf" {print $7}' "$work/jar")
jobs=()
for i in 1 2 3 4; do
    curl -s -o /dev/null -b "$work/jar" -H 'Content-Type: application/json' \
        -H "X-CSRF-Token: $csrf" -d "{\"email\":\"nobody$i@example.com\",\"password\":\"not the password\"}" \
        "http://$addr/auth/login" &
    jobs+=("$!")
done
wait "${jobs[@]}"
echo
echo "### 2. after 4 logins at once"
account "$pid"

# curl opens at most 300 at once per process: a process per 250 streams.
for _ in $(seq 250); do printf 'url = "http://%s/v1/events"\noutput = "/dev/null"\n' "$addr"; done >"$work/urls"
jobs=()
for _ in $(seq $(((streams + 249) / 250))); do
    curl -s -Z --parallel-max 250 --max-time 5 -H "Authorization: Bearer $token" \
        -K "$work/urls" 2>/dev/null &
    jobs+=("$!")
done
wait "${jobs[@]}" || true
sleep 2
echo
echo "### 3. after $streams streams opened at once and closed"
account "$pid"

sleep "$keep"
echo
echo "### 4. after ${keep} s without a hash (CONSOLED_HASH_MEMORY_KEEP_SECONDS=$keep)"
account "$pid"

if [ -n "${REF:-}" ]; then
    rp=$(port)
    DATABASE_URL="$url" ASYNC_REF_LISTEN="127.0.0.1:$rp" \
        benches/compare/target/release/async-ref >/dev/null 2>&1 &
    pids+=("$!")
    sleep 3
    echo
    echo "### the async reference, idle, fresh"
    account "$!"
fi
