-- Keys the instances share when the operator configures none. Today only 'csrf': the key that
-- signs CSRF tokens when neither CONSOLED_CSRF_KEY nor CONSOLED_DATA_KEY is set. The first
-- instance to start stores a random one; every instance reads the same, so a token issued by
-- one instance passes on another. Whoever can read this table can sign CSRF tokens, but a token
-- is bound to a session token, which the database does not hold.
CREATE TABLE server_keys (
    name        text PRIMARY KEY,
    key         bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
