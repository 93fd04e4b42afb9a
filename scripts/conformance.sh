#!/usr/bin/env bash
# `make conformance`: schemathesis (from PyPI, pinned) tests a live consoled against its own OpenAPI
# document (GET /openapi.json) with every check. See docs/CONFORMANCE.md.
#
#   scripts/conformance.sh [extra schemathesis run options...]
#
# Environment: DATABASE_URL (else the private test cluster, scripts/pg.sh); CONFORMANCE_EXAMPLES
# (most test cases per operation and phase, default 100); CONFORMANCE_SEED (default: random);
# CARGO_PROFILE (dev or release, default dev).
# Exit status 0 when schemathesis found nothing in any part. The work directory (server log,
# JUnit reports, mail) is kept when something failed.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

SCHEMATHESIS_VERSION=4.32.5
venv=.venv-conformance
examples=${CONFORMANCE_EXAMPLES:-100}
profile=${CARGO_PROFILE:-dev}

log() { echo "conformance: $*" >&2; }

install_schemathesis() {
    if [ -x "$venv/bin/schemathesis" ] &&
        [ "$("$venv/bin/schemathesis" --version 2>/dev/null | awk '{print $NF}')" = "$SCHEMATHESIS_VERSION" ]; then
        return
    fi
    log "installing schemathesis $SCHEMATHESIS_VERSION into $venv"
    python3 -m venv "$venv" || {
        log "python3 -m venv failed (on Debian: apt-get install python3-venv)"
        exit 2
    }
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

json_field() { # json_field EXPR  (reads JSON on stdin; EXPR indexes `d`)
    python3 -c "import json, sys; d = json.load(sys.stdin); print($1)"
}

# A database of its own, made afresh each run (beside DATABASE_URL's, as the tests make theirs):
# the failed sign-ins of an earlier run within 15 minutes would otherwise spend this run's
# budget, and its logins would be answered 429. Without psql or the right to create databases,
# DATABASE_URL's own is used, and says so.
fresh_database() {
    local name=consoled_conformance
    case "$1" in postgres://* | postgresql://*) ;; *) echo "$1"; return ;; esac
    if command -v psql >/dev/null &&
        psql "$1" -qAtc "DROP DATABASE IF EXISTS $name WITH (FORCE)" >/dev/null 2>&1 &&
        psql "$1" -qAtc "CREATE DATABASE $name" >/dev/null 2>&1; then
        python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$1" "$name"
    else
        log "no database of its own (psql, or the right to create one, is missing): DATABASE_URL's is used"
        echo "$1"
    fi
}

install_schemathesis
url=$(fresh_database "${DATABASE_URL:-$(scripts/pg.sh start test 55433)}")
log "building consoled ($profile)"
cargo build --locked --bins --profile "$profile" >&2
bin=target/$([ "$profile" = dev ] && echo debug || echo "$profile")/consoled

work=$(mktemp -d "${TMPDIR:-/tmp}/consoled-conformance.XXXXXX")
port=$(free_port)
base=http://127.0.0.1:$port
server_pid=
status=1
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [ "$status" = 0 ]; then rm -rf "$work"; else log "kept $work (server.log, report/)"; fi
}
trap cleanup EXIT

# Providers are configured (with endpoints on a closed local port, so no request leaves the
# machine) so that /auth/oauth/*/start and /callback run their real code rather than 404.
DATABASE_URL=$url \
    CONSOLED_LISTEN=127.0.0.1:$port \
    CONSOLED_BASE_URL=$base \
    CONSOLED_COOKIE_SECURE=false \
    CONSOLED_MAIL_DIR="$work/mail" \
    CONSOLED_PING_SECONDS=1 \
    CONSOLED_TRUSTED_PROXIES=127.0.0.1 \
    CONSOLED_GITHUB_CLIENT_ID=conformance CONSOLED_GITHUB_CLIENT_SECRET=conformance \
    CONSOLED_GITHUB_AUTH_URL=http://127.0.0.1:9/authorize \
    CONSOLED_GITHUB_TOKEN_URL=http://127.0.0.1:9/token \
    CONSOLED_GITHUB_API_URL=http://127.0.0.1:9/api \
    CONSOLED_GOOGLE_CLIENT_ID=conformance CONSOLED_GOOGLE_CLIENT_SECRET=conformance \
    CONSOLED_GOOGLE_AUTH_URL=http://127.0.0.1:9/authorize \
    CONSOLED_GOOGLE_TOKEN_URL=http://127.0.0.1:9/token \
    CONSOLED_GOOGLE_USERINFO_URL=http://127.0.0.1:9/userinfo \
    RUST_LOG=${RUST_LOG:-warn} \
    "$bin" serve >"$work/server.log" 2>&1 &
server_pid=$!

for _ in $(seq 100); do
    curl -fsS "$base/healthz" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.2
done
curl -fsS "$base/healthz" >/dev/null

# The setup's requests come "through a proxy" from an address of their own, so that earlier runs'
# sign-ups (30 per address per 5 minutes) do not refuse them; schemathesis sends no
# X-Forwarded-For, so its requests count against 127.0.0.1.
client_ip=10.$((RANDOM % 256)).$((RANDOM % 256)).$((RANDOM % 254 + 1))

# csrf_for [SESSION]: a CSRF token bound to SESSION (none: a pre-session token), from GET /auth/csrf.
csrf_for() {
    curl -fsS -o /dev/null -D - ${1:+-b "svc_session=$1"} "$base/auth/csrf" |
        sed -n 's/^[Ss]et-[Cc]ookie: svc_csrf=\([^;]*\);.*/\1/p'
}
# post PATH BODY [SESSION]: a POST under /auth with a CSRF pair for SESSION; the body goes to
# $work/out.json, the head to $work/out.head; prints the new svc_session token, if the answer sets one.
post() {
    local csrf
    csrf=$(csrf_for "${3:-}")
    curl -fsS -o "$work/out.json" -D "$work/out.head" -H "X-Forwarded-For: $client_ip" \
        -H "Content-Type: application/json" -H "X-CSRF-Token: $csrf" \
        -b "svc_csrf=$csrf${3:+; svc_session=$3}" --data "$2" "$base$1" >/dev/null
    sed -n 's/^[Ss]et-[Cc]ookie: svc_session=\([^;]*\);.*/\1/p' "$work/out.head"
}
totp_now() { # totp_now BASE32_SECRET: the current RFC 6238 code (SHA-1, 6 digits, 30 s)
    python3 -c '
import base64, hashlib, hmac, struct, sys, time
key = base64.b32decode(sys.argv[1])
mac = hmac.new(key, struct.pack(">Q", int(time.time()) // 30), hashlib.sha1).digest()
offset = mac[-1] & 15
print("%06d" % ((struct.unpack(">I", mac[offset:offset + 4])[0] & 0x7FFFFFFF) % 1000000))' "$1"
}
credentials() { # credentials EMAIL PASSWORD: a login body
    printf '{"email": "%s", "password": "%s"}' "$1" "$2"
}

# The main user: a full session, a second session for logout, a TOTP secret offered but not
# enabled (so that `enable` reaches its code check), an API token for the event stream.
stamp="$(date +%s)-$$"
email="conformance-$stamp@example.com"
password=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')
session=$(post /auth/signup "{\"email\": \"$email\", \"password\": \"$password\", \"name\": \"Conformance\"}")
org=$(json_field 'd["organizations"][0]["id"]' <"$work/out.json")
logout_session=$(post /auth/login "$(credentials "$email" "$password")")
post /auth/mfa/totp/setup "" "$session" >/dev/null
project=$(DATABASE_URL=$url "$bin" project create --org "$org" --name conformance | json_field 'd["id"]')
token=$(DATABASE_URL=$url "$bin" token create --project "$project" --name conformance | json_field 'd["token"]')

# The MFA user: second factor enabled; a full session (completed with a recovery code, as the
# enabling code's time step cannot be replayed) and a session still pending its second factor.
mfa_email="conformance-mfa-$stamp@example.com"
mfa_setup_session=$(post /auth/signup "{\"email\": \"$mfa_email\", \"password\": \"$password\", \"name\": \"Conformance MFA\"}")
post /auth/mfa/totp/setup "" "$mfa_setup_session" >/dev/null
secret=$(json_field 'd["secret"]' <"$work/out.json")
post /auth/mfa/totp/enable "{\"code\": \"$(totp_now "$secret")\"}" "$mfa_setup_session" >/dev/null
recovery=$(json_field 'd["recovery_codes"][0]' <"$work/out.json")
pending=$(post /auth/login "$(credentials "$mfa_email" "$password")")
mfa_session=$(post /auth/mfa/totp "{\"code\": \"$recovery\"}" "$pending")
pending=$(post /auth/login "$(credentials "$mfa_email" "$password")")
# The sessions user: its own sessions are listed and ended (DELETE /auth/sessions ends every
# other one, which must not be the main user's), and wrong current passwords of password changes
# count against it alone. A second session gives DELETE /auth/sessions something to end.
sessions_email="conformance-sessions-$stamp@example.com"
sessions_session=$(post /auth/signup "{\"email\": \"$sessions_email\", \"password\": \"$password\", \"name\": \"Conformance Sessions\"}")
post /auth/login "$(credentials "$sessions_email" "$password")" >/dev/null
# The account users: one whose name, locale, export and address change are exercised (past five
# address changes a day: 429), and one for DELETE /auth/account, whose first success deletes it
# (then 401, as logout's).
account_session=$(post /auth/signup "{\"email\": \"conformance-account-$stamp@example.com\", \"password\": \"$password\", \"name\": \"Conformance Account\"}")
deletion_session=$(post /auth/signup "{\"email\": \"conformance-deletion-$stamp@example.com\", \"password\": \"$password\", \"name\": \"Conformance Deletion\"}")
# The teams user: organizations, members, invitations and projects run on a user of their own
# (a project deleted there must not be the main user's, whose API token the streams use), with a
# team organization to find.
teams_email="conformance-teams-$stamp@example.com"
teams_session=$(post /auth/signup "{\"email\": \"$teams_email\", \"password\": \"$password\", \"name\": \"Conformance Teams\"}")
post /v1/organizations '{"name": "Conformance"}' "$teams_session" >/dev/null
for v in session logout_session token mfa_session pending sessions_session account_session deletion_session teams_session; do
    [ -n "${!v}" ] || { log "setup failed: no $v"; exit 1; }
done
log "server $base (log $work/server.log), users $email and $mfa_email"

export CONFORMANCE_TOKEN=$token
seed_args=()
[ -n "${CONFORMANCE_SEED:-}" ] && seed_args=(--seed "$CONFORMANCE_SEED")
extra=("$@")

# run NAME SESSION [options]: one schemathesis run with SESSION as the cookieAuth session and a
# CSRF pair bound to it, or to CSRF_SESSION when that is set (empty: a pre-session pair); the
# token is bound to the session (docs/API.md). The timeout only guards against a hang: a part
# takes seconds.
failed=0
run() {
    local name=$1
    log "part $name"
    CONFORMANCE_SESSION=$2 CONFORMANCE_CSRF=$(csrf_for "${CSRF_SESSION-$2}") timeout 600 "$venv/bin/schemathesis" --config-file scripts/conformance.toml run \
        "$base/openapi.json" --url "$base" \
        --checks all \
        --max-examples "$examples" \
        --generation-database none \
        --report junit --report-junit-path "$work/report/$name.xml" \
        "${seed_args[@]}" "${@:3}" "${extra[@]}" || failed=1
}
# Which operations accept a request depends on the session's state, which a schema cannot say;
# so each state gets the operations that act on it:
# - no session: the POSTs that need none get a pre-session CSRF pair (schemathesis sends no
#   session cookie to an operation without cookieAuth, so a pair bound to a session would fail);
CSRF_SESSION='' run public "$session" --include-path-regex '^/auth/(signup|login|verify-email|password/forgot|password/reset|account/email/confirm)$'
# - second factor not enabled: everything but the above, the three below, logout and the
#   sessions, account and teams parts';
run main "$session" --exclude-path-regex '^(/auth/(signup|login|verify-email|password/forgot|password/reset|logout|mfa/totp|mfa/totp/disable|mfa/recovery-codes|password/change|sessions.*|account.*)|/v1/(organizations|invitations|projects).*)$'
# - the own sessions and the password change, on a user of their own (see above);
run sessions "$sessions_session" --include-path-regex '^/auth/(sessions.*|password/change)$'
# - organizations, members, invitations and projects, on the teams user (see above);
run teams "$teams_session" --include-path-regex '^/v1/(organizations|invitations|projects)'
# - second factor enabled, full session: disable and recovery-codes (wrong codes: 401, then 429);
run mfa "$mfa_session" --include-path-regex '^/auth/mfa/(totp/disable|recovery-codes)$'
# - the account (name and locale, export, address change) on a user of its own, and its deletion
#   on another: the first DELETE that passes (no password, a recent sign-in) deletes it;
run account "$account_session" --include-path-regex '^/auth/account(/export|/email)?$' --exclude-operation-id delete_auth_account
run deletion "$deletion_session" --include-operation-id delete_auth_account
# - session pending its second factor: /auth/mfa/totp (five wrong codes revoke it: then 401);
run pending "$pending" --include-path /auth/mfa/totp
# - logout revokes its session, so it gets one of its own; after its first 204 it answers 401.
#   GET /openapi.json goes here: schemathesis 4.32.5 drops the schema's own URL from a run
#   selected by an exclude filter (main above), not from one selected by an include filter.
run logout "$logout_session" --include-path-regex '^/(auth/logout|openapi\.json)$'

if grep -q "ERROR\|panicked" "$work/server.log"; then
    log "the server logged errors:"
    grep "ERROR\|panicked" "$work/server.log" | head -20 >&2
    failed=1
fi
status=$failed
[ "$status" = 0 ] && log "no failures"
exit "$status"
