-- consoled schema, version 1.
-- Every secret (session token, API token, mail token, recovery code, OAuth state binding) is stored
-- only as a SHA-256 hash; passwords as argon2id PHC strings. Times are the database clock (now()).

CREATE TABLE users (
    id              bigserial PRIMARY KEY,
    email           text NOT NULL,              -- trimmed, lower-cased (one place: Email::parse)
    name            text NOT NULL,
    locale          text NOT NULL DEFAULT 'en',
    password_hash   text,                       -- NULL: signed up through an identity provider
    email_verified  boolean NOT NULL DEFAULT false,
    totp_secret     bytea,                      -- set while the second factor is enabled
    totp_pending    bytea,                      -- secret offered by /auth/mfa/totp/setup, not yet confirmed
    totp_last_step  bigint,                     -- highest accepted TOTP time step (replay defence)
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (email);

CREATE TABLE organizations (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('personal', 'team')),
    status      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended', 'closed')),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE memberships (
    id          bigserial PRIMARY KEY,
    org_id      bigint NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role        text NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, user_id)
);
CREATE INDEX memberships_user_idx ON memberships (user_id);

CREATE TABLE projects (
    id          bigserial PRIMARY KEY,
    org_id      bigint NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, name)
);

CREATE TABLE sessions (
    id            bigserial PRIMARY KEY,
    token_hash    bytea NOT NULL UNIQUE,
    user_id       bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    mfa_pending   boolean NOT NULL,
    failed_codes  integer NOT NULL DEFAULT 0,   -- wrong second-factor codes on this pending session
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL          -- absolute end; idle end is last_seen_at + idle timeout
);
CREATE INDEX sessions_user_idx ON sessions (user_id);
CREATE INDEX sessions_expires_idx ON sessions (expires_at);

CREATE TABLE api_tokens (
    id            bigserial PRIMARY KEY,
    project_id    bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name          text NOT NULL DEFAULT '',
    token_hash    bytea NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    revoked_at    timestamptz
);
CREATE INDEX api_tokens_project_idx ON api_tokens (project_id);

CREATE TABLE recovery_codes (
    id          bigserial PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    code_hash   bytea NOT NULL,
    used_at     timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, code_hash)
);

-- Single-use tokens mailed to a user: email verification and password reset.
CREATE TABLE mail_tokens (
    id          bigserial PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    purpose     text NOT NULL CHECK (purpose IN ('verify_email', 'password_reset')),
    token_hash  bytea NOT NULL UNIQUE,
    email       text NOT NULL,                  -- the address the token was sent to
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);
CREATE INDEX mail_tokens_user_idx ON mail_tokens (user_id, purpose);

-- Durable outbox: a mail is queued in the transaction that causes it and delivered by a sender
-- thread. A row names what to send, never a secret: a token is minted when the mail is built.
CREATE TABLE outbox (
    id               bigserial PRIMARY KEY,
    kind             text NOT NULL,             -- verify_email, password_reset, mfa_enabled, ...
    user_id          bigint REFERENCES users (id) ON DELETE CASCADE,
    recipient        text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text
);
CREATE INDEX outbox_due_idx ON outbox (next_attempt_at);

CREATE TABLE external_identities (
    provider    text NOT NULL CHECK (provider IN ('google', 'github')),
    subject     text NOT NULL,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    email       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, subject)
);
CREATE INDEX external_identities_user_idx ON external_identities (user_id);

-- OAuth sign-in attempts between /start and /callback (single use, 10 minutes).
CREATE TABLE oauth_states (
    id             bigserial PRIMARY KEY,
    state_hash     bytea NOT NULL UNIQUE,
    binding_hash   bytea NOT NULL,              -- hash of the browser-binding cookie
    provider       text NOT NULL,
    pkce_verifier  text NOT NULL,
    nonce          text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL
);

-- Open event streams, counted across every instance. An instance renews its leases by heartbeat;
-- a crashed instance's leases lapse on their own.
CREATE TABLE stream_leases (
    id           bigserial PRIMARY KEY,
    instance_id  text NOT NULL,
    user_id      bigint REFERENCES users (id) ON DELETE CASCADE,
    token_id     bigint REFERENCES api_tokens (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    CHECK ((user_id IS NULL) <> (token_id IS NULL))
);
CREATE INDEX stream_leases_user_idx ON stream_leases (user_id) WHERE user_id IS NOT NULL;
CREATE INDEX stream_leases_token_idx ON stream_leases (token_id) WHERE token_id IS NOT NULL;

-- Sliding-window rate limits shared by all instances: one row per counted event.
CREATE TABLE rate_events (
    bucket  text NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rate_events_bucket_idx ON rate_events (bucket, at);

-- The change-stream contract for every component that changes resources. Call it inside the
-- transaction that makes the change: NOTIFY is delivered on commit only.
CREATE FUNCTION consoled_notify_change(p_type text, p_id bigint, p_op text,
                                       p_project_id bigint DEFAULT NULL,
                                       p_org_id bigint DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_type IS NULL OR p_type NOT IN ('server', 'volume', 'floating_ip', 'elastic_ip', 'primary_ip',
            'network', 'nat_gateway', 'firewall', 'load_balancer', 'image', 'placement_group',
            'ssh_key', 'action', 'stack', 'api_token', 'project', 'ticket', 'wallet',
            'organization', 'membership', 'incident', 'user') THEN
        RAISE EXCEPTION 'consoled_notify_change: unknown type %', p_type USING ERRCODE = '22023';
    END IF;
    IF p_op IS NULL OR p_op NOT IN ('insert', 'update', 'delete') THEN
        RAISE EXCEPTION 'consoled_notify_change: unknown op %', p_op USING ERRCODE = '22023';
    END IF;
    IF p_id IS NULL THEN
        RAISE EXCEPTION 'consoled_notify_change: id is required' USING ERRCODE = '22023';
    END IF;
    PERFORM pg_notify('consoled_change', json_build_object(
        'type', p_type, 'id', p_id, 'op', p_op,
        'project_id', p_project_id, 'org_id', p_org_id)::text);
END
$$;

-- Ends open streams on every instance: 's:<session id>', 'u:<user id>' (membership changed),
-- 't:<token id>'.
CREATE FUNCTION consoled_notify_control(p_payload text) RETURNS void LANGUAGE sql AS $$
    SELECT pg_notify('consoled_control', p_payload);
$$;

-- The service's own tables announce their changes through the same contract.
CREATE FUNCTION consoled_users_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM consoled_notify_change('user', OLD.id, 'delete');
        RETURN OLD;
    END IF;
    -- Announce only what a client can see: not last-step bookkeeping or pending secrets.
    IF TG_OP = 'UPDATE' AND (NEW.email, NEW.name, NEW.locale, NEW.email_verified,
            NEW.totp_secret IS NOT NULL, NEW.password_hash IS NOT NULL)
        IS NOT DISTINCT FROM (OLD.email, OLD.name, OLD.locale, OLD.email_verified,
            OLD.totp_secret IS NOT NULL, OLD.password_hash IS NOT NULL) THEN
        RETURN NEW;
    END IF;
    PERFORM consoled_notify_change('user', NEW.id, lower(TG_OP));
    RETURN NEW;
END
$$;
CREATE TRIGGER users_changed AFTER INSERT OR UPDATE OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION consoled_users_changed();

CREATE FUNCTION consoled_organizations_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r organizations;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    PERFORM consoled_notify_change('organization', r.id, lower(TG_OP), NULL, r.id);
    RETURN r;
END
$$;
CREATE TRIGGER organizations_changed AFTER INSERT OR UPDATE OR DELETE ON organizations
    FOR EACH ROW EXECUTE FUNCTION consoled_organizations_changed();

CREATE FUNCTION consoled_memberships_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r memberships;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    -- First tell every instance to refresh the member's visibility, then announce the change.
    PERFORM consoled_notify_control('u:' || r.user_id);
    IF TG_OP = 'UPDATE' AND OLD.user_id <> NEW.user_id THEN
        PERFORM consoled_notify_control('u:' || OLD.user_id);
    END IF;
    PERFORM consoled_notify_change('membership', r.id, lower(TG_OP), NULL, r.org_id);
    RETURN r;
END
$$;
CREATE TRIGGER memberships_changed AFTER INSERT OR UPDATE OR DELETE ON memberships
    FOR EACH ROW EXECUTE FUNCTION consoled_memberships_changed();

CREATE FUNCTION consoled_projects_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r projects;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    PERFORM consoled_notify_change('project', r.id, lower(TG_OP), r.id, r.org_id);
    RETURN r;
END
$$;
CREATE TRIGGER projects_changed AFTER INSERT OR UPDATE OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION consoled_projects_changed();

CREATE FUNCTION consoled_api_tokens_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r api_tokens; o bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    SELECT org_id INTO o FROM projects WHERE id = r.project_id;
    IF TG_OP = 'DELETE' OR r.revoked_at IS NOT NULL THEN
        PERFORM consoled_notify_control('t:' || r.id);
    END IF;
    IF TG_OP = 'UPDATE' AND (NEW.name, NEW.revoked_at) IS NOT DISTINCT FROM (OLD.name, OLD.revoked_at) THEN
        RETURN r;   -- last_used_at bookkeeping is not a change a client can see
    END IF;
    PERFORM consoled_notify_change('api_token', r.id, lower(TG_OP), r.project_id, o);
    RETURN r;
END
$$;
CREATE TRIGGER api_tokens_changed AFTER INSERT OR UPDATE OR DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION consoled_api_tokens_changed();

-- A session row disappears on logout, password reset, expiry clean-up or MFA changes: its open
-- streams end on every instance.
CREATE FUNCTION consoled_sessions_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM consoled_notify_control('s:' || OLD.id);
    RETURN OLD;
END
$$;
CREATE TRIGGER sessions_deleted AFTER DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION consoled_sessions_deleted();
