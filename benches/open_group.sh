#!/usr/bin/env bash
# The database's CPU for one group of stream openings: the statement `db::leases::open` sends
# (`consoled_open_streams`), 256 openings over 26 API tokens, ten each as in a storm, run by one
# pgbench client in a transaction that is rolled back, so every run does the same work (tokens
# written as used, leases inserted and counted). Prints the backend's CPU per opening, read from
# /proc/PID/schedstat (so run it on the database's machine, as the cluster's owner or root).
#
#   DATABASE_URL=postgres://... benches/open_group.sh [TRANSACTIONS]
#
# The database needs 26 live API tokens without a maker (a storm's: `sseload` makes them). Only
# the table bench_open_group is written, and dropped at the end. Run VACUUM before comparing two
# databases: each rolled-back run leaves dead leases that the next ones step over.
set -euo pipefail
url=${DATABASE_URL:?DATABASE_URL}
runs=${1:-200}
psql -qAt "$url" -v ON_ERROR_STOP=1 <<'SQL'
SET client_min_messages = warning;
DROP TABLE IF EXISTS bench_open_group;
CREATE TABLE bench_open_group AS
SELECT (array_agg(h ORDER BY n))[1:256] AS t, (array_agg(NULL::bytea ORDER BY n))[1:256] AS s
  FROM (SELECT t.token_hash AS h, row_number() OVER () AS n
          FROM (SELECT token_hash FROM live_api_tokens WHERE created_by IS NULL
                 ORDER BY id DESC LIMIT 26) t,
               generate_series(1, 10)) x;
SQL
script=$(mktemp)
trap 'rm -f "$script"; psql -qAt "$url" -c "DROP TABLE IF EXISTS bench_open_group" >/dev/null' EXIT
cat >"$script" <<'SQL'
BEGIN;
SELECT s.outcome, s.lease_id, s.token_id, s.project_id, s.session_id, s.user_id, s.remaining,
       CASE WHEN s.orgs IS NOT NULL THEN ARRAY(
           SELECT o.id FROM organizations o
            WHERE o.id = ANY (s.orgs) AND o.status = 'active' ORDER BY o.id) END,
       (SELECT o.status FROM projects p JOIN organizations o ON o.id = p.org_id
         WHERE p.id = s.project_id AND s.token_id IS NOT NULL)
  FROM consoled_open_streams('bench-open-group', (SELECT t FROM bench_open_group),
                             (SELECT s FROM bench_open_group), 1800, 60, 10, 30) s
 ORDER BY s.item;
ROLLBACK;
SQL
PGAPPNAME=open_group pgbench -n -M prepared -f "$script" -t "$runs" "$url" >/dev/null 2>&1 &
bench=$!
pid=
while [ -z "$pid" ] && kill -0 "$bench" 2>/dev/null; do
    pid=$(psql -qAt "$url" -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'open_group'")
done
ns=0
while [ -n "$pid" ] && { read -r now _ <"/proc/$pid/schedstat"; } 2>/dev/null; do
    ns=$now
    sleep 0.01
done
wait "$bench"
echo "backend CPU per opening: $(awk -v ns="$ns" -v n="$((runs * 256))" 'BEGIN { printf "%.1f", ns / n / 1000 }') us ($runs groups of 256)"
