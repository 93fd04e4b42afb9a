-- The account's whole life (issue 32, part B): disabled accounts, the email change, and a user's
-- deletion that takes its personal organization along, decided in the database so that the
-- endpoint, the command line and a plain `DELETE FROM users` agree.

-- Who made an API token (NULL: the command line). The same statement as the migration that
-- introduced user-made tokens, so that either may run first.
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS created_by bigint REFERENCES users (id) ON DELETE CASCADE;
CREATE INDEX IF NOT EXISTS api_tokens_created_by_idx ON api_tokens (created_by) WHERE created_by IS NOT NULL;

-- Set by `consoled user disable`, cleared by `consoled user enable`. While set, no route signs the
-- user in (a session can no longer be created: `db::sessions::create`), and the API tokens the user
-- made are refused (`consoled_token_creator_disabled`).
ALTER TABLE users ADD COLUMN disabled_at timestamptz;

-- What a mail says beyond its kind (the time and client of the change it reports, the new
-- address): never a secret.
ALTER TABLE outbox ADD COLUMN details jsonb;

-- A third purpose of mailed tokens: the link to a new address that makes an email change. The
-- check is rebuilt from its current list, so that another migration's purposes survive in
-- either order.
DO $$
DECLARE
    v_values text[];
BEGIN
    SELECT ARRAY(SELECT DISTINCT m[1]
                   FROM regexp_matches(pg_get_constraintdef(c.oid), '''([a-z_]+)''', 'g') AS m)
      INTO v_values
      FROM pg_constraint c
     WHERE c.conrelid = 'mail_tokens'::regclass AND c.conname = 'mail_tokens_purpose_check';
    IF NOT 'email_change' = ANY (v_values) THEN
        ALTER TABLE mail_tokens DROP CONSTRAINT mail_tokens_purpose_check;
        EXECUTE format('ALTER TABLE mail_tokens ADD CONSTRAINT mail_tokens_purpose_check
                        CHECK (purpose = ANY (%L::text[]))', v_values || 'email_change'::text);
    END IF;
END
$$;

-- Whether an API token's maker is disabled (a command-line token has none): the one definition,
-- read wherever a token is accepted.
CREATE FUNCTION consoled_token_creator_disabled(p_created_by bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM users WHERE id = p_created_by AND disabled_at IS NOT NULL);
$$;

-- Before a user goes: a team organization (not closed) whose only owner the user is stops the
-- deletion (an organization nobody may manage), naming it; the personal organization goes with
-- the user, and with it its projects and their API tokens (their own triggers announce each and
-- end the tokens' streams). The caller checks first and answers 409; this is the rule for every
-- other way in.
CREATE FUNCTION consoled_users_deleting() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_orgs text;
BEGIN
    SELECT string_agg(format('%s (id %s)', o.name, o.id), ', ' ORDER BY o.id) INTO v_orgs
      FROM memberships m JOIN organizations o ON o.id = m.org_id
     WHERE m.user_id = OLD.id AND m.role = 'owner' AND o.kind = 'team' AND o.status <> 'closed'
       AND NOT EXISTS (SELECT 1 FROM memberships other
                        WHERE other.org_id = o.id AND other.role = 'owner'
                          AND other.user_id <> OLD.id);
    IF v_orgs IS NOT NULL THEN
        RAISE EXCEPTION 'user % is the last owner of the team organization(s) %', OLD.id, v_orgs
            USING ERRCODE = 'restrict_violation',
                  HINT = 'Make another member an owner, or close the organization, first.';
    END IF;
    DELETE FROM organizations o
     WHERE o.kind = 'personal'
       AND EXISTS (SELECT 1 FROM memberships m
                    WHERE m.org_id = o.id AND m.user_id = OLD.id AND m.role = 'owner');
    RETURN OLD;
END
$$;
CREATE TRIGGER users_deleting BEFORE DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION consoled_users_deleting();

-- Access follows the account on every instance: disabling ends every session (each deletion
-- sends 's:', which ends its streams) and the streams of the tokens the user made ('t:'); every
-- instance drops what it remembers of the user ('u:') when the user is disabled, enabled or
-- deleted. Named so that it fires before `users_changed` (triggers fire in name order).
CREATE FUNCTION consoled_users_access() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM consoled_notify_control('u:' || OLD.id);
        RETURN OLD;
    END IF;
    IF (OLD.disabled_at IS NULL) = (NEW.disabled_at IS NULL) THEN
        RETURN NEW;
    END IF;
    IF NEW.disabled_at IS NOT NULL THEN
        DELETE FROM sessions WHERE user_id = NEW.id;
        PERFORM consoled_notify_control('t:' || t.id)
           FROM api_tokens t WHERE t.created_by = NEW.id AND t.revoked_at IS NULL;
    END IF;
    PERFORM consoled_notify_control('u:' || NEW.id);
    RETURN NEW;
END
$$;
CREATE TRIGGER users_access AFTER UPDATE OF disabled_at OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION consoled_users_access();

-- As in 0001, with disabling and enabling announced as a `user` update too.
CREATE OR REPLACE FUNCTION consoled_users_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM consoled_notify_change('user', OLD.id, 'delete');
        RETURN OLD;
    END IF;
    -- Announce only what a client can see: not last-step bookkeeping or pending secrets.
    IF TG_OP = 'UPDATE' AND (NEW.email, NEW.name, NEW.locale, NEW.email_verified,
            NEW.totp_secret IS NOT NULL, NEW.password_hash IS NOT NULL, NEW.disabled_at IS NOT NULL)
        IS NOT DISTINCT FROM (OLD.email, OLD.name, OLD.locale, OLD.email_verified,
            OLD.totp_secret IS NOT NULL, OLD.password_hash IS NOT NULL, OLD.disabled_at IS NOT NULL) THEN
        RETURN NEW;
    END IF;
    PERFORM consoled_notify_change('user', NEW.id, lower(TG_OP));
    RETURN NEW;
END
$$;

-- `consoled_open_streams` as in 0008, except that a token whose maker is disabled is not found
-- (the three places it looks a token up by hash).
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
          FROM api_tokens t
         WHERE t.token_hash = ANY (p_tokens) AND t.revoked_at IS NULL
           AND NOT consoled_token_creator_disabled(t.created_by)
        UNION ALL
        SELECT hashtextextended('streams:user:' || s.user_id, 0)
          FROM sessions s
         WHERE s.token_hash = ANY (p_sessions) AND s.expires_at > now() AND NOT s.mfa_pending
           AND s.last_seen_at > now() - make_interval(secs => p_idle)
    ) holders;
    -- `unnest` keeps the array's (ascending) order.
    PERFORM pg_advisory_xact_lock(k) FROM unnest(v_keys) AS k;

    UPDATE api_tokens t SET last_used_at = now()
     WHERE t.token_hash = ANY (p_tokens) AND t.revoked_at IS NULL
       AND NOT consoled_token_creator_disabled(t.created_by)
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
        SELECT it.item, t.id AS token_id, t.project_id, s.id AS session_id, s.user_id,
               coalesce(s.mfa_pending, false) AS pending,
               extract(epoch FROM least(s.expires_at, s.last_seen_at
                                        + make_interval(secs => p_idle)) - now())::float8
                   AS remaining,
               CASE WHEN t.id IS NOT NULL THEN hashtextextended('streams:token:' || t.id, 0)
                    WHEN s.id IS NOT NULL THEN hashtextextended('streams:user:' || s.user_id, 0)
               END AS k
          FROM items it
          LEFT JOIN LATERAL (
              SELECT t.id, t.project_id FROM api_tokens t
               WHERE t.token_hash = it.th AND t.revoked_at IS NULL
                 AND NOT consoled_token_creator_disabled(t.created_by)) t ON true
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
           CASE WHEN w.session_id IS NOT NULL AND NOT w.pending THEN w.remaining END,
           CASE WHEN w.token_id IS NULL AND w.session_id IS NOT NULL AND NOT w.pending
                THEN ARRAY(SELECT m.org_id FROM memberships m WHERE m.user_id = w.user_id) END
      FROM who w LEFT JOIN admitted a ON a.item = w.item
     ORDER BY w.item;
END
$$;
