-- Device cookies (OWASP, "Slow down online guessing attacks with device cookies"): a browser that
-- signed in to an account keeps a cookie bound to that account. With it, sign-ins to that account
-- are not held by the account's or the address's failed-sign-in limits, only by the cookie's own
-- small failure budget; at that budget the cookie is void. Only the SHA-256 of the cookie is kept.
CREATE TABLE device_cookies (
    token_hash  bytea PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    failures    integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX device_cookies_user_idx ON device_cookies (user_id);
CREATE INDEX device_cookies_expires_idx ON device_cookies (expires_at);
