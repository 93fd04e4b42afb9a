-- `consoled_open_streams` as in 0010 (same arguments, same rows, same locks in the same order),
-- with less work per group, since a reconnect storm spends most of its database time here
-- (BENCHMARKS.md, "the storm's cost per opening"):
--
-- - After the locks, each distinct credential is looked up once, in `live_api_tokens` (and
--   `sessions`), and that one look-up feeds the `last_used_at` and `last_seen_at` touches and
--   every item of the group; 0010 read the view twice after the locks, the second time once per
--   item (256 look-ups with the view's `users` anti-join for 26 tokens).
-- - The touches are written in the same statement as the leases. They keep their conditions on
--   the row being written (re-checked by PostgreSQL when another transaction wrote it first), and
--   a session's remaining seconds are read from the row as touched (`RETURNING`), as 0010 read it
--   in the statement after the touch.
-- - The lease's id comes from `nextval('stream_leases_id_seq')`: 0010's
--   `pg_get_serial_sequence` was evaluated for every admitted item (a catalog look-up each).
--
-- Unchanged: the keys are found and locked (ascending) before anything is counted, and the
-- counting statement starts after the locks are held, so it sees every lease committed by a
-- group that held them first; `instances` is written before it. The same signature, so that an
-- instance of the previous release, which calls it during a rolling upgrade, gets the same answers.
CREATE OR REPLACE FUNCTION consoled_open_streams(p_instance text, p_tokens bytea[], p_sessions bytea[],
                                      p_idle float8, p_touch_after float8, p_limit int,
                                      p_alive_for float8)
RETURNS TABLE (item int, outcome text, lease_id bigint, token_id bigint, project_id bigint,
               session_id bigint, user_id bigint, remaining float8, orgs bigint[])
LANGUAGE plpgsql
-- Planned once per connection (0007: planning each call's arrays anew cost more than running).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_keys bigint[];
BEGIN
    SELECT array_agg(DISTINCT k ORDER BY k) INTO v_keys FROM (
        SELECT hashtextextended('streams:token:' || t.id, 0) AS k
          FROM live_api_tokens t
         WHERE t.token_hash = ANY (p_tokens)
        UNION ALL
        SELECT hashtextextended('streams:user:' || s.user_id, 0)
          FROM sessions s
         WHERE s.token_hash = ANY (p_sessions) AND s.expires_at > now() AND NOT s.mfa_pending
           AND s.last_seen_at > now() - make_interval(secs => p_idle)
    ) holders;
    -- `unnest` keeps the array's (ascending) order.
    PERFORM pg_advisory_xact_lock(k) FROM unnest(v_keys) AS k;

    INSERT INTO instances (id, alive_until)
    VALUES (p_instance, now() + make_interval(secs => p_alive_for))
    ON CONFLICT (id) DO NOTHING;

    RETURN QUERY
    WITH items AS MATERIALIZED (
        SELECT u.i::int AS item, u.th, u.sh
          FROM unnest(p_tokens, p_sessions) WITH ORDINALITY AS u(th, sh, i)
    ), tok AS MATERIALIZED (
        -- Each token once, however many of the group's items carry it.
        SELECT t.id, t.token_hash, t.project_id, t.expires_at,
               hashtextextended('streams:token:' || t.id, 0) AS k
          FROM live_api_tokens t
         WHERE t.token_hash = ANY (p_tokens)
    ), ses AS MATERIALIZED (
        SELECT s.id, s.token_hash, s.user_id, s.mfa_pending, s.expires_at, s.last_seen_at,
               hashtextextended('streams:user:' || s.user_id, 0) AS k
          FROM sessions s
         WHERE s.token_hash = ANY (p_sessions) AND s.expires_at > now()
           AND (s.mfa_pending OR s.last_seen_at > now() - make_interval(secs => p_idle))
    ), token_touch AS (
        UPDATE api_tokens t SET last_used_at = now()
          FROM tok
         WHERE t.id = tok.id
           AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute')
    ), session_touch AS (
        UPDATE sessions s SET last_seen_at = now()
          FROM ses
         WHERE s.id = ses.id AND s.token_hash = ses.token_hash
           AND s.expires_at > now() AND NOT s.mfa_pending
           AND s.last_seen_at > now() - make_interval(secs => p_idle)
           AND s.last_seen_at < now() - make_interval(secs => p_touch_after)
        RETURNING s.id, s.last_seen_at
    ), who AS MATERIALIZED (
        SELECT it.item, t.id AS token_id, t.project_id, t.expires_at AS token_expires,
               s.id AS session_id, s.user_id,
               coalesce(s.mfa_pending, false) AS pending,
               extract(epoch FROM least(s.expires_at,
                                        coalesce(st.last_seen_at, s.last_seen_at)
                                        + make_interval(secs => p_idle)) - now())::float8
                   AS remaining,
               coalesce(t.k, s.k) AS k
          FROM items it
          LEFT JOIN tok t ON t.token_hash = it.th
          LEFT JOIN ses s ON s.token_hash = it.sh
          LEFT JOIN session_touch st ON st.id = s.id
    ), holders AS MATERIALIZED (
        SELECT DISTINCT w.k, w.token_id, CASE WHEN w.token_id IS NULL THEN w.user_id END AS user_id
          FROM who w
         WHERE w.k = ANY (v_keys) AND NOT w.pending
    ), alive AS MATERIALIZED (
        SELECT i.id FROM instances i WHERE i.alive_until > now()
    ), live AS MATERIALIZED (
        -- Each holder's leases on live instances, counted in one join for the whole group (0008).
        SELECT h.k, count(l.id) AS n
          FROM holders h
          LEFT JOIN (stream_leases l JOIN alive a ON a.id = l.instance_id)
                 ON l.token_id = h.token_id
         WHERE h.token_id IS NOT NULL
         GROUP BY h.k
        UNION ALL
        SELECT h.k, count(l.id)
          FROM holders h
          LEFT JOIN (stream_leases l JOIN alive a ON a.id = l.instance_id)
                 ON l.user_id = h.user_id
         WHERE h.token_id IS NULL
         GROUP BY h.k
    ), ranked AS (
        SELECT w.item, w.token_id, w.user_id,
               lv.n + row_number() OVER (PARTITION BY w.k ORDER BY w.item) AS nth
          FROM who w JOIN live lv ON lv.k = w.k
         WHERE NOT w.pending
    ), admitted AS MATERIALIZED (
        SELECT r.item, r.token_id, r.user_id,
               nextval('stream_leases_id_seq'::regclass) AS lease
          FROM ranked r
         WHERE r.nth <= p_limit
    ), inserted AS (
        INSERT INTO stream_leases (id, instance_id, user_id, token_id)
        SELECT a.lease, p_instance, CASE WHEN a.token_id IS NULL THEN a.user_id END, a.token_id
          FROM admitted a
    )
    SELECT w.item,
           CASE WHEN a.lease IS NOT NULL THEN 'ok'
                WHEN w.pending THEN 'mfa_required'
                WHEN w.k = ANY (v_keys) THEN 'full'
                ELSE 'unauthorized' END,
           a.lease, w.token_id, w.project_id, w.session_id, w.user_id,
           CASE WHEN w.session_id IS NOT NULL AND NOT w.pending THEN w.remaining
                WHEN w.token_id IS NOT NULL
                THEN extract(epoch FROM w.token_expires - now())::float8 END,
           CASE WHEN w.token_id IS NULL AND w.session_id IS NOT NULL AND NOT w.pending
                THEN ARRAY(SELECT m.org_id FROM memberships m WHERE m.user_id = w.user_id) END
      FROM who w LEFT JOIN admitted a ON a.item = w.item
     ORDER BY w.item;
END
$$;
