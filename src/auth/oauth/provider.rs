//! The identity providers a request may name: the built-in Google and GitHub, and the OpenID
//! Connect providers of the configuration (`oidc`).

use std::fmt;

use super::oidc::OidcProvider;
use crate::app::App;
use crate::config::oidc::TokenAuth;
use crate::config::ProviderConfig;

/// A configured provider.
#[derive(Clone, Copy)]
pub enum Provider<'a> {
    Github(&'a ProviderConfig),
    Google(&'a ProviderConfig),
    Oidc(&'a OidcProvider),
}

impl<'a> Provider<'a> {
    /// The provider of a short name, if it is configured (an OpenID Connect provider counts
    /// whether or not it has answered yet).
    pub fn find(app: &'a App, name: &str) -> Option<Provider<'a>> {
        match name {
            "github" => app.config.github.as_ref().map(Provider::Github),
            "google" => app.config.google.as_ref().map(Provider::Google),
            _ => app.oidc.get(name).map(Provider::Oidc),
        }
    }

    /// Every provider `GET /auth/providers` lists: the configured built-in ones, and the OpenID
    /// Connect providers that have answered their discovery; sorted by name.
    pub fn listed(app: &'a App) -> Vec<Provider<'a>> {
        let builtin = [
            app.config.github.as_ref().map(Provider::Github),
            app.config.google.as_ref().map(Provider::Google),
        ];
        let oidc = app
            .oidc
            .all()
            .filter(|p| p.discovered().is_some())
            .map(Provider::Oidc);
        let mut all: Vec<Provider> = builtin.into_iter().flatten().chain(oidc).collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }

    /// The short name of the paths and of `GET /auth/providers`.
    pub fn name(&self) -> &'a str {
        match self {
            Provider::Github(_) => "github",
            Provider::Google(_) => "google",
            Provider::Oidc(p) => &p.config.name,
        }
    }

    pub fn display_name(&self) -> &'a str {
        match self {
            Provider::Github(_) => "GitHub",
            Provider::Google(_) => "Google",
            Provider::Oidc(p) => &p.config.display_name,
        }
    }

    /// Under what name a link to this provider's accounts is stored (`external_identities`):
    /// the built-in ones by name; an OpenID Connect provider by its issuer, within which `sub`
    /// is unique (OpenID Connect Core 2), so that renaming it keeps its links.
    pub fn link_key(&self) -> &'a str {
        match self {
            Provider::Oidc(p) => &p.config.issuer,
            _ => self.name(),
        }
    }

    pub fn scope(&self) -> &'a str {
        match self {
            Provider::Github(_) => "read:user user:email",
            Provider::Google(_) => "openid email profile",
            Provider::Oidc(p) => &p.config.scopes,
        }
    }

    /// Whether the attempt carries a nonce (OpenID Connect providers do; GitHub is OAuth only).
    pub fn uses_nonce(&self) -> bool {
        !matches!(self, Provider::Github(_))
    }

    pub fn token_auth(&self) -> TokenAuth {
        match self {
            Provider::Oidc(p) => p.config.token_auth,
            // As documented for them: id and secret in the form.
            _ => TokenAuth::Post,
        }
    }
}

impl fmt::Display for Provider<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
