#!/usr/bin/env bash
# Private PostgreSQL clusters under the project folder, for `make run` and `make test`.
#
#   scripts/pg.sh start NAME PORT   create (first use) and start .pg/NAME on 127.0.0.1:PORT,
#                                   then print its DATABASE_URL on stdout
#   scripts/pg.sh stop NAME         stop it
#
# Installs Debian's postgresql when its binaries are missing (as root). initdb refuses to run as
# root, so as root the cluster belongs to, and runs as, the `postgres` user.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:?usage: pg.sh start|stop NAME [PORT]}
name=${2:?cluster name}
port=${3:-55432}
base="$here/.pg/$name"
data="$base/data"

log() { echo "pg.sh: $*" >&2; }

find_bin() {
    local d
    if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
        dirname "$(command -v pg_ctl)"; return
    fi
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$d/pg_ctl" ] && { echo "$d"; return; }
    done
}

ensure_postgres() {
    bin=$(find_bin || true)
    if [ -z "$bin" ]; then
        if [ "$(id -u)" -ne 0 ]; then
            log "PostgreSQL is not installed; run 'sudo apt-get install postgresql' or set DATABASE_URL"
            exit 1
        fi
        log "installing Debian's postgresql (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq postgresql >&2
        bin=$(find_bin)
    fi
}

port_busy() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Runs a command as the cluster's owner: ourselves, or `postgres` when we are root.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

case "$cmd" in
start)
    ensure_postgres
    mkdir -p "$base"
    if [ "$(id -u)" -eq 0 ]; then
        id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql postgres
        chown postgres "$base"
        # The postgres user must be able to reach the folder.
        d="$base"; while [ "$d" != "/" ]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
    fi
    if [ ! -f "$data/PG_VERSION" ]; then
        # Another checkout's cluster may hold the usual port: take the next free one.
        while port_busy "$port"; do port=$((port + 1)); done
        log "creating cluster $data on port $port"
        as_owner "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-locale >/dev/null
        cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$base'
max_connections = 400
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
CONF
    fi
    # One role must give its password (the first matching line wins; every other role is
    # trusted): tests/cli.rs shows what a wrong password prints. Added to older clusters too.
    if ! grep -q '^host all consoled_password ' "$data/pg_hba.conf"; then
        as_owner sed -i '1i host all consoled_password 127.0.0.1/32 scram-sha-256' "$data/pg_hba.conf"
        reload=yes
    fi
    port=$(sed -n 's/^port = \([0-9]*\)$/\1/p' "$data/postgresql.conf" | tail -n 1)
    if ! as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        # Another checkout's cluster may have taken our port since: move to the next free one.
        if port_busy "$port"; then
            while port_busy "$port"; do port=$((port + 1)); done
            log "port taken; cluster $data moves to port $port"
            echo "port = $port" >>"$data/postgresql.conf"
        fi
        # A port found free may be taken before the server binds it (any program's ephemeral
        # port may land in this range): then move on, a few times.
        tries=0
        until as_owner "$bin/pg_ctl" -D "$data" -l "$base/server.log" -w -t 60 -o "-p $port" start >/dev/null; do
            tries=$((tries + 1))
            if [ "$tries" -ge 5 ] || ! tail -n 5 "$base/server.log" | grep -q "could not bind"; then
                log "the cluster $data did not start: $base/server.log"
                exit 1
            fi
            port=$((port + 1))
            while port_busy "$port"; do port=$((port + 1)); done
            log "port taken while starting; cluster $data moves to port $port"
            echo "port = $port" >>"$data/postgresql.conf"
        done
    elif [ "${reload:-}" = yes ]; then
        as_owner "$bin/pg_ctl" -D "$data" reload >/dev/null
    fi
    url="postgres://postgres@127.0.0.1:$port/consoled"
    if ! as_owner psql -h 127.0.0.1 -p "$port" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='consoled'" postgres | grep -q 1; then
        as_owner psql -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE consoled" postgres >/dev/null
    fi
    echo "$url"
    ;;
stop)
    bin=$(find_bin || true)
    if [ -n "$bin" ] && [ -f "$data/PG_VERSION" ]; then
        as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    ;;
*)
    echo "usage: pg.sh start|stop NAME [PORT]" >&2; exit 2 ;;
esac
