-- consoled schema, version 2: account takeover defences.
--
-- 1. External identities linked while the account's address was unproven.
--
-- Before this version, a sign-in whose address the provider had not verified created an account
-- for that address and linked the identity to it. Whoever did so never proved they own the
-- address, and the link outlived the owner's later proof of it (verification or reset mail).
-- The service now refuses such sign-ins and removes such links when the address is proven; this
-- migration removes the links already stored, and ends the sessions of their accounts (which
-- ends their event streams, through the sessions trigger):
--
-- * every link of an account whose address is still unverified: no provider vouched for it
--   (a verified sign-in would have marked the account verified);
-- * the link that created an account (same transaction, so the same created_at) when the
--   address was proven after it by a mailed link or by another provider's verified sign-in:
--   we cannot tell whether the creating provider had verified the address. If it had, the
--   owner's next sign-in with that provider links it again (its verified address matches).
--
-- Only deletions and a replaced function: running it twice changes nothing more.
WITH tainted AS (
    SELECT e.provider, e.subject, e.user_id
      FROM external_identities e JOIN users u ON u.id = e.user_id
     WHERE NOT u.email_verified
        OR (e.created_at = u.created_at
            AND (EXISTS (SELECT 1 FROM mail_tokens t
                          WHERE t.user_id = u.id AND t.used_at >= e.created_at)
                 OR EXISTS (SELECT 1 FROM external_identities o
                             WHERE o.user_id = u.id AND o.created_at > e.created_at)))
), ended AS (
    DELETE FROM sessions s USING tainted t WHERE s.user_id = t.user_id
)
DELETE FROM external_identities e USING tainted t
 WHERE e.provider = t.provider AND e.subject = t.subject;

-- 2. A project that moves to another organization is announced to the organization it left as
-- well as to the one it joined (in that order): the members of the old one learn that it is
-- gone, and every instance's project -> organization routing learns the new owner from the
-- last announcement.
CREATE OR REPLACE FUNCTION consoled_projects_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r projects;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    IF TG_OP = 'UPDATE' AND OLD.org_id <> NEW.org_id THEN
        PERFORM consoled_notify_change('project', r.id, 'update', r.id, OLD.org_id);
    END IF;
    PERFORM consoled_notify_change('project', r.id, lower(TG_OP), r.id, r.org_id);
    RETURN r;
END
$$;
