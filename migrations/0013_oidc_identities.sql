-- Company sign-in (OpenID Connect providers by configuration). A link of such a provider is keyed
-- by its issuer URL and the token's `sub` (OpenID Connect Core 2: `sub` is unique only within its
-- issuer), so that renaming the provider in the configuration keeps its links, and pointing a
-- name at another issuer links nobody to a stranger's account. The built-in providers keep their
-- names.
ALTER TABLE external_identities
    DROP CONSTRAINT external_identities_provider_check,
    ADD CONSTRAINT external_identities_provider_check
        CHECK (provider IN ('google', 'github') OR provider ~ '^https?://[^[:space:]]+$');
