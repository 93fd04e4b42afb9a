-- API tokens that users make themselves (issue 31), beside those the command line makes.
--
-- `created_by`: the user who made it; NULL for the command line's. Deleting the user deletes
-- the token (and the delete trigger ends its streams). `expires_at`: NULL never (the command
-- line's, unless told otherwise); the API always sets one. `scope`: `read` or `read_write`;
-- tokens made before this migration could do everything, and keep `read_write`.
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS created_by bigint REFERENCES users (id) ON DELETE CASCADE;
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS expires_at timestamptz;
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS scope text NOT NULL DEFAULT 'read_write'
    CHECK (scope IN ('read', 'read_write'));
CREATE INDEX IF NOT EXISTS api_tokens_created_by_idx ON api_tokens (created_by)
    WHERE created_by IS NOT NULL;

-- What makes a token live, said once: every lookup of a token by its secret (`db::tokens::find`,
-- the stream openings below) and every re-check of a token by id (`db::tokens::is_live`,
-- `db::visibility::live_tokens`) reads this view, so a condition added here holds everywhere.
-- Not revoked, not expired, and made by the command line or by a user who is still a member of
-- the project's organization (a member who leaves takes their tokens' power along).
CREATE VIEW live_api_tokens AS
SELECT t.*
  FROM api_tokens t
 WHERE t.revoked_at IS NULL
   AND (t.expires_at IS NULL OR t.expires_at > now())
   AND (t.created_by IS NULL OR EXISTS (
        SELECT 1 FROM projects p JOIN memberships m ON m.org_id = p.org_id
         WHERE p.id = t.project_id AND m.user_id = t.created_by));

-- A session given a new token (a password change) keeps its id, but its old token must stop
-- working on every instance at once: migration 0009's `r:<session id>:<tag>` (sent when a
-- session's token is replaced) also makes instances that remember checked sessions
-- (`GET /auth/check`) forget it.

-- `consoled_open_streams` as in 0008, but a token is looked up in `live_api_tokens`, and for a
-- token `remaining` is the seconds until it expires (NULL: never), so that its streams end then.
CREATE OR REPLACE FUNCTION consoled_open_streams(p_instance text, p_tokens bytea[], p_sessions bytea[],
                                      p_idle float8, p_touch_after float8, p_limit int,
                                      p_alive_for float8)
RETURNS TABLE (item int, outcome text, lease_id bigint, token_id bigint, project_id bigint,
               session_id bigint, user_id bigint, remaining float8, orgs bigint[])
LANGUAGE plpgsql
-- Planned once per connection: planning the statements anew for each call's arrays cost more
-- than running them (0.88 against 0.33 ms for one stream, 1.8 against 0.72 ms for twelve).
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

    UPDATE api_tokens t SET last_used_at = now()
      FROM live_api_tokens l
     WHERE l.id = t.id AND l.token_hash = ANY (p_tokens)
       AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute');
    UPDATE sessions s SET last_seen_at = now()
     WHERE s.token_hash = ANY (p_sessions) AND s.expires_at > now() AND NOT s.mfa_pending
       AND s.last_seen_at > now() - make_interval(secs => p_idle)
       AND s.last_seen_at < now() - make_interval(secs => p_touch_after);
    INSERT INTO instances (id, alive_until)
    VALUES (p_instance, now() + make_interval(secs => p_alive_for))
    ON CONFLICT (id) DO NOTHING;

    RETURN QUERY
    WITH items AS MATERIALIZED (
        SELECT u.i::int AS item, u.th, u.sh
          FROM unnest(p_tokens, p_sessions) WITH ORDINALITY AS u(th, sh, i)
    ), who AS MATERIALIZED (
        -- LATERAL: one index look-up per item, whatever the size of the tables.
        SELECT it.item, t.id AS token_id, t.project_id, t.expires_at AS token_expires,
               s.id AS session_id, s.user_id,
               coalesce(s.mfa_pending, false) AS pending,
               extract(epoch FROM least(s.expires_at, s.last_seen_at
                                        + make_interval(secs => p_idle)) - now())::float8
                   AS remaining,
               CASE WHEN t.id IS NOT NULL THEN hashtextextended('streams:token:' || t.id, 0)
                    WHEN s.id IS NOT NULL THEN hashtextextended('streams:user:' || s.user_id, 0)
               END AS k
          FROM items it
          LEFT JOIN LATERAL (
              SELECT t.id, t.project_id, t.expires_at FROM live_api_tokens t
               WHERE t.token_hash = it.th) t ON true
          LEFT JOIN LATERAL (
              SELECT s.id, s.user_id, s.mfa_pending, s.expires_at, s.last_seen_at FROM sessions s
               WHERE s.token_hash = it.sh AND s.expires_at > now()
                 AND (s.mfa_pending OR s.last_seen_at > now() - make_interval(secs => p_idle))
          ) s ON true
    ), holders AS MATERIALIZED (
        SELECT DISTINCT w.k, w.token_id, CASE WHEN w.token_id IS NULL THEN w.user_id END AS user_id
          FROM who w
         WHERE w.k = ANY (v_keys) AND NOT w.pending
    ), alive AS MATERIALIZED (
        SELECT i.id FROM instances i WHERE i.alive_until > now()
    ), live AS MATERIALIZED (
        -- Each holder's leases on live instances, counted in one join for the whole group: a
        -- count per holder was planned from the table's statistics, and a table that held one
        -- token's 19,500 leases made it a scan of every lease for each holder (0.4 s a group).
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
               nextval(pg_get_serial_sequence('stream_leases', 'id')) AS lease
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
