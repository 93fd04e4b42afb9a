-- Teams (issue 32): invitations to organizations, and what an organization's status does to
-- the change stream.
--
-- 1. Invitations. An owner or admin invites an address with a role; the mail carries a link
--    valid 7 days, used once: by a signed-in user whose verified address is the invited one, or
--    by signing up through it. `org_id` NULL is an operator's invitation to sign up only
--    (`consoled invitation create` without `--org`), for a service whose sign-up needs one.
--    Like every mailed token, the link's token is minted when the mail is sent (the outbox never
--    holds a secret) and only its SHA-256 is kept; a newer invitation of the same address to the
--    same organization replaces the open one.
CREATE TABLE invitations (
    id           bigserial PRIMARY KEY,
    org_id       bigint REFERENCES organizations (id) ON DELETE CASCADE,
    email        text NOT NULL,                 -- trimmed, lower-cased (Email::parse)
    role         text NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    invited_by   bigint REFERENCES users (id) ON DELETE SET NULL,
    token_hash   bytea UNIQUE,                  -- NULL until the mail went out
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    accepted_at  timestamptz,
    accepted_by  bigint REFERENCES users (id) ON DELETE SET NULL
);
CREATE INDEX invitations_org_idx ON invitations (org_id, email);
CREATE INDEX invitations_email_idx ON invitations (email);

-- The invitation an outbox row mails. A cancelled invitation is ended, not deleted (deleting it
-- here would wait for a sender holding the outbox row, which waits for the invitation: a
-- deadlock); the sender drops its mail as obsolete. The cascade serves the daily purge.
ALTER TABLE outbox ADD COLUMN invitation_id bigint REFERENCES invitations (id) ON DELETE CASCADE;

-- 2. An organization's status reaches every instance at once. A suspended or closed
--    organization's changes reach no stream and its projects' API tokens are refused. So when
--    the status changes, before the change is announced: `u:<member>` for every member (each
--    instance reloads the member's visible organizations, which are the active ones, and a
--    cache of checked sessions drops the member's entries), and `t:<token>` for every live token
--    of its projects (their streams end; a cache drops them). NOTIFY is delivered on commit, in
--    order, on the listener's one connection: the reloads come before the announcement.
CREATE OR REPLACE FUNCTION consoled_organizations_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r organizations;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    IF TG_OP = 'UPDATE' AND NEW.status IS DISTINCT FROM OLD.status THEN
        PERFORM consoled_notify_control('u:' || m.user_id)
           FROM memberships m WHERE m.org_id = r.id;
        PERFORM consoled_notify_control('t:' || t.id)
           FROM api_tokens t JOIN projects p ON p.id = t.project_id
          WHERE p.org_id = r.id AND t.revoked_at IS NULL;
    END IF;
    PERFORM consoled_notify_change('organization', r.id, lower(TG_OP), NULL, r.id);
    RETURN r;
END
$$;
