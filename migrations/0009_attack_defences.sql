-- consoled schema, version 9: defences against the attacks of issue 37.
--
-- 1. Password budgets taken before the password is verified.
--
-- A sign-in looked at its failed-sign-in buckets, verified the password, and counted a failure
-- afterwards: ten concurrent guesses all found one place left and were all verified. Now a
-- password check first takes a place in each of its buckets, all or none, under the buckets'
-- advisory locks (`consoled_rate_take`), and gives the places back when the password was
-- right. `claim` names the places one check took, so that it gives back exactly those; rows
-- written by an older instance, and every counted failure, have none.
ALTER TABLE rate_events ADD COLUMN claim bigint;

-- Takes one place in every bucket `p_keys[i]` (window `p_secs[i]` seconds, `p_caps[i]` places)
-- for claim `p_claim`, unless one of them is full: then nothing is taken and the answer is the
-- first full bucket's index (0-based) and the seconds until it has room. No row: all taken.
-- Each statement sees what committed before it (READ COMMITTED), so the count after the locks
-- sees every place taken by whoever held them before.
CREATE FUNCTION consoled_rate_take(p_keys text[], p_secs float8[], p_caps bigint[],
                                   p_claim bigint)
RETURNS TABLE (item int, wait float8) LANGUAGE plpgsql AS $$
DECLARE
    v_locks bigint[];
    v_item int;
    v_wait float8;
BEGIN
    -- In ascending order (`unnest` keeps the array's), so that two checks of the same buckets
    -- never wait on each other.
    SELECT array_agg(DISTINCT hashtextextended(key, 0) ORDER BY hashtextextended(key, 0))
      INTO v_locks FROM unnest(p_keys) AS key;
    PERFORM pg_advisory_xact_lock(k) FROM unnest(v_locks) AS k;
    SELECT b.i, extract(epoch FROM r.oldest + make_interval(secs => b.secs) - now())::float8
      INTO v_item, v_wait
      FROM unnest(p_keys, p_secs, p_caps) WITH ORDINALITY AS b(key, secs, cap, i)
     CROSS JOIN LATERAL (
           SELECT count(*) AS n, min(at) AS oldest
             FROM (SELECT at FROM rate_events
                    WHERE bucket = b.key AND at > now() - make_interval(secs => b.secs)
                    ORDER BY at DESC LIMIT b.cap) AS recent) AS r
     WHERE r.n >= b.cap
     ORDER BY b.i
     LIMIT 1;
    IF FOUND THEN
        item := v_item - 1;
        wait := v_wait;
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO rate_events (bucket, claim) SELECT key, p_claim FROM unnest(p_keys) AS key;
END
$$;

-- 2. A second factor enrolled while the address was unproven.
--
-- A stranger can sign up with someone else's address and enable TOTP at once. When the owner
-- proves the address by a reset link, the factor must go with the stranger's password; but the
-- owner may have clicked the verification link of the stranger's sign-up first, so "the address
-- is unproven now" is not enough to know. The flag says the factor was enabled before the
-- address was proven; a proof that hands the account to the address's owner removes a flagged
-- factor (see `auth::claim_address`).
ALTER TABLE users ADD COLUMN totp_unproven boolean NOT NULL DEFAULT false;
UPDATE users SET totp_unproven = true WHERE totp_secret IS NOT NULL AND NOT email_verified;

-- 3. A session's token replaced (password change, second factor enabled or disabled, other
-- sessions ended): the streams opened with the old token end on every instance, as those of a
-- deleted session do. The payload names the session and the first 8 bytes of the old token's
-- hash (`r:<id>:<16 hex digits>`), so that streams opened with the new token go on.
CREATE FUNCTION consoled_sessions_rotated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM consoled_notify_control(
        'r:' || OLD.id || ':' || encode(substring(OLD.token_hash FROM 1 FOR 8), 'hex'));
    RETURN NEW;
END
$$;
CREATE TRIGGER sessions_rotated AFTER UPDATE OF token_hash ON sessions
    FOR EACH ROW WHEN (OLD.token_hash IS DISTINCT FROM NEW.token_hash)
    EXECUTE FUNCTION consoled_sessions_rotated();
