-- The account's whole life (issue 32, part B): disabled accounts, the email change, and a user's
-- deletion that takes its personal organization along, decided in the database so that the
-- endpoint, the command line and a plain `DELETE FROM users` agree.

-- Who made an API token (NULL: the command line). The same statement as migration 0010, which
-- introduced user-made tokens and runs first: a no-op then, kept as agreed.
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS created_by bigint REFERENCES users (id) ON DELETE CASCADE;
CREATE INDEX IF NOT EXISTS api_tokens_created_by_idx ON api_tokens (created_by) WHERE created_by IS NOT NULL;

-- Set by `consoled user disable`, cleared by `consoled user enable`. While set, no route signs the
-- user in (a session can no longer be created: `db::sessions::create`), and the API tokens the user
-- made are refused (the view `live_api_tokens`, below).
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

-- What makes a token live (migration 0010's view, the one definition that `db::tokens::find`,
-- `is_live`, `db::visibility::live_tokens` and `consoled_open_streams` read), with one more
-- condition: its maker is not disabled (a command-line token has none). Same columns, so the
-- view is replaced in place and its readers are untouched.
CREATE OR REPLACE VIEW live_api_tokens AS
SELECT t.*
  FROM api_tokens t
 WHERE t.revoked_at IS NULL
   AND (t.expires_at IS NULL OR t.expires_at > now())
   AND (t.created_by IS NULL OR EXISTS (
        SELECT 1 FROM projects p JOIN memberships m ON m.org_id = p.org_id
         WHERE p.id = t.project_id AND m.user_id = t.created_by))
   AND NOT EXISTS (SELECT 1 FROM users u WHERE u.id = t.created_by AND u.disabled_at IS NOT NULL);
