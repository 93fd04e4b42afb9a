-- Liveness per instance (issue 24): an instance proves it is alive by renewing its one row in
-- `instances`; a stream lease counts only while its instance's row says it is alive. Keeping
-- streams alive no longer writes a row per stream, and a crashed instance's slots are free once
-- its row lapses (seconds), not when each lease would have expired.
CREATE TABLE instances (
    id           text PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    alive_until  timestamptz NOT NULL
);

-- `expires_at` is no longer written or read by this version; it stays (nullable) so that
-- instances of the previous version keep working during a rolling upgrade (the two versions do
-- not count each other's streams until it ends).
ALTER TABLE stream_leases ALTER COLUMN expires_at DROP NOT NULL;
CREATE INDEX stream_leases_instance_idx ON stream_leases (instance_id);

-- Opens a stream in one statement (one round trip): authenticates the API token (by hash; its
-- `last_used_at` noted, to the minute, as `db::tokens::find` does) or the session (by hash;
-- marked as used when last marked more than `p_touch_after` seconds ago), and takes a lease if the holder has fewer than `p_limit` leases of live instances.
-- The advisory lock per holder makes count-then-insert atomic across instances; each statement
-- of the function sees what committed before it (READ COMMITTED), so the count follows the lock.
-- `outcome`: ok, unauthorized, mfa_required or full. A session's organizations come along, so
-- that its stream routes without another query.
CREATE FUNCTION consoled_open_stream(p_instance text, p_token_hash bytea, p_session_hash bytea,
                                     p_idle float8, p_touch_after float8, p_limit int,
                                     p_alive_for float8)
RETURNS TABLE (outcome text, lease_id bigint, token_id bigint, project_id bigint,
               session_id bigint, user_id bigint, remaining float8, orgs bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    v_token bigint;
    v_project bigint;
    v_used timestamptz;
    v_session bigint;
    v_user bigint;
    v_pending boolean;
    v_remaining float8;
    v_since float8;
    v_live bigint;
    v_lease bigint;
    v_orgs bigint[];
BEGIN
    IF p_token_hash IS NOT NULL THEN
        SELECT t.id, t.project_id, t.last_used_at INTO v_token, v_project, v_used
          FROM api_tokens t
         WHERE t.token_hash = p_token_hash AND t.revoked_at IS NULL;
        IF NOT FOUND THEN
            RETURN QUERY SELECT 'unauthorized', NULL::bigint, NULL::bigint, NULL::bigint,
                                NULL::bigint, NULL::bigint, NULL::float8, NULL::bigint[];
            RETURN;
        END IF;
        -- At most one write a minute per token, however many streams it opens.
        IF v_used IS NULL OR v_used < now() - interval '1 minute' THEN
            UPDATE api_tokens SET last_used_at = now() WHERE id = v_token;
        END IF;
        PERFORM pg_advisory_xact_lock(hashtextextended('streams:token:' || v_token, 0));
        SELECT count(*) INTO v_live
          FROM stream_leases l JOIN instances i ON i.id = l.instance_id
         WHERE l.token_id = v_token AND i.alive_until > now();
    ELSE
        SELECT s.id, s.user_id, s.mfa_pending,
               extract(epoch FROM least(s.expires_at,
                   CASE WHEN s.mfa_pending THEN s.expires_at
                        ELSE s.last_seen_at + make_interval(secs => p_idle) END) - now())::float8,
               extract(epoch FROM now() - s.last_seen_at)::float8
          INTO v_session, v_user, v_pending, v_remaining, v_since
          FROM sessions s
         WHERE s.token_hash = p_session_hash AND s.expires_at > now()
           AND (s.mfa_pending OR s.last_seen_at > now() - make_interval(secs => p_idle));
        IF NOT FOUND OR v_pending THEN
            RETURN QUERY SELECT CASE WHEN v_pending THEN 'mfa_required' ELSE 'unauthorized' END,
                                NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
                                NULL::bigint, NULL::float8, NULL::bigint[];
            RETURN;
        END IF;
        IF v_since > p_touch_after THEN
            UPDATE sessions SET last_seen_at = now() WHERE id = v_session;
            v_remaining := extract(epoch FROM least(
                (SELECT expires_at FROM sessions WHERE id = v_session),
                now() + make_interval(secs => p_idle)) - now())::float8;
        END IF;
        PERFORM pg_advisory_xact_lock(hashtextextended('streams:user:' || v_user, 0));
        SELECT count(*) INTO v_live
          FROM stream_leases l JOIN instances i ON i.id = l.instance_id
         WHERE l.user_id = v_user AND i.alive_until > now();
        v_orgs := ARRAY(SELECT m.org_id FROM memberships m WHERE m.user_id = v_user);
    END IF;
    IF v_live >= p_limit THEN
        RETURN QUERY SELECT 'full', NULL::bigint, v_token, v_project, v_session, v_user,
                            v_remaining, v_orgs;
        RETURN;
    END IF;
    -- The instance registers itself at start and by heartbeat; this covers a start while the
    -- database was away (no write when the row exists).
    INSERT INTO instances (id, alive_until)
    VALUES (p_instance, now() + make_interval(secs => p_alive_for))
    ON CONFLICT (id) DO NOTHING;
    INSERT INTO stream_leases (instance_id, user_id, token_id)
    VALUES (p_instance, v_user, v_token)
    RETURNING id INTO v_lease;
    RETURN QUERY SELECT 'ok', v_lease, v_token, v_project, v_session, v_user, v_remaining, v_orgs;
END
$$;
