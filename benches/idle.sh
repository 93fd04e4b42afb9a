#!/usr/bin/env bash
# `make bench-idle`: an idle consoled's resident memory, mapping by mapping (issue 38, item 4;
# BENCHMARKS.md, "Idle memory"). Starts the release binary against DATABASE_URL (make provides a
# private cluster) and prints, from /proc/PID/smaps, what each kind of mapping holds resident:
#   1. idle, fresh (what `make bench-compare` reports as "idle server RSS");
#   2. right after a few logins (each hash thread's argon2 memory);
#   3. after STREAMS streams (default 1,000) were opened at once and closed, the server quiet
#      again;
#   4. once a whole turn of CONSOLED_MEMORY_TRIM_SECONDS (TRIM, default 10 here; 60 by default)
#      without an opening has passed: malloc's free memory given back.
# CONSOLED_HASH_MEMORY_KEEP_SECONDS is KEEP (default 3 here; 60 by default).
# Needs curl and psql. The async reference's idle figure, for the ratio: REF=1 (built by
# `make bench-compare`, benches/compare/target/release/async-ref).
set -euo pipefail
cd "$(dirname "$0")/.."
url="${DATABASE_URL:?DATABASE_URL}"
streams=${STREAMS:-1000}
keep=${KEEP:-3}
trim=${TRIM:-10}
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
    CONSOLED_MEMORY_TRIM_SECONDS="$trim" \
    CONSOLED_MAX_STREAMS_PER_PRINCIPAL=1000000 CONSOLED_MAX_STREAMS_PER_INSTANCE=1000000 \
    CONSOLED_MAX_CONNECTIONS=1000000 CONSOLED_CLIENT_SHARE=1 \
    CONSOLED_TRUSTED_PROXIES=127.0.0.1/32 CONSOLED_CLIENT_IP_HEADER=X-Real-IP \
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

# Logins for addresses no account has (each verified against the dummy hash: a full hash), from
# addresses of their own (the header the server trusts from loopback), so that no rate limit
# answers instead of a hash.
curl -s -c "$work/jar" "http://$addr/auth/csrf" >/dev/null
csrf=$(awk '$6 == "svc_csrf" {print $7}' "$work/jar")
jobs=()
for i in 1 2 3 4; do
    curl -s -o /dev/null -w '%{http_code} ' -b "$work/jar" -H 'Content-Type: application/json' \
        -H "X-CSRF-Token: $csrf" -H "X-Real-IP: 10.$((RANDOM % 250)).$((RANDOM % 250)).$i" \
        -d "{\"email\":\"idle-$$-$RANDOM-$i@example.com\",\"password\":\"not the password\"}" \
        "http://$addr/auth/login" >"$work/login$i" &
    jobs+=("$!")
done
wait "${jobs[@]}"
echo
echo "### 2. after 4 logins at once (answers: $(cat "$work"/login*))"
account "$pid"

# curl opens at most 300 at once per process: a process per 250 streams, each opened without
# waiting for the first (--parallel-immediate). VmHWM shows the peak they made.
for _ in $(seq 250); do printf 'url = "http://%s/v1/events"\noutput = "/dev/null"\n' "$addr"; done >"$work/urls"
jobs=()
for _ in $(seq $(((streams + 249) / 250))); do
    curl -s -Z --parallel-immediate --parallel-max 250 --max-time 5 -H "Authorization: Bearer $token" \
        -K "$work/urls" 2>/dev/null &
    jobs+=("$!")
done
wait "${jobs[@]}" || true
sleep "$keep"
echo
echo "### 3. after $streams streams opened at once and closed, ${keep} s later (the hash memory's keep time)"
account "$pid"

sleep $((2 * trim + 1))
echo
echo "### 4. $((2 * trim + 1)) s later: a turn of CONSOLED_MEMORY_TRIM_SECONDS=$trim without an opening"
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
