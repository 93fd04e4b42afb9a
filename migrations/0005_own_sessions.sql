-- A user's own sessions (issue 25): the list of them and ending one.
--
-- `public_id` names a session to its owner (GET /auth/sessions, DELETE /auth/sessions/{id}).
-- It is random and unrelated to the cookie's token, so showing it gives nothing away; the
-- serial `id` stays internal (it would tell how many sessions the service has made). The
-- default fills existing rows and the rows of instances that predate this migration.
-- `client_address` (the client as resolved through trusted proxies) and `user_agent` (a short
-- description such as "Firefox on Linux", never the raw header) are those of the sign-in, then
-- of the latest use; NULL for sessions made before this migration.
ALTER TABLE sessions
    ADD COLUMN public_id      text NOT NULL DEFAULT replace(gen_random_uuid()::text, '-', ''),
    ADD COLUMN client_address text,
    ADD COLUMN user_agent     text;
CREATE UNIQUE INDEX sessions_public_id_idx ON sessions (public_id);
