//! Sign-in through external identity providers (docs/API.md): `GET /auth/providers`,
//! `GET /auth/oauth/{provider}/start` and `GET /auth/oauth/{provider}/callback`, for Google,
//! GitHub and the OpenID Connect providers of the configuration (`oidc`).
//!
//! `start` stores a single-use attempt (state, PKCE verifier, and a nonce for OpenID Connect; 10
//! minutes) bound to the browser by the HttpOnly cookie `svc_oauth`, and redirects to the
//! provider. `callback` consumes the attempt, checks that it belongs to this provider (mix-up
//! defence) and to this browser, exchanges the code, and signs the user in (see `accounts`).
//! Every refusal is a 302 to `{console}/login?error=<code>` without a session (the codes of
//! `Declined`, `account_disabled` for a disabled account among them); an unknown or unconfigured
//! provider is 404 on both endpoints.
//!
//! No database connection is held while a provider is called, and every provider call is bounded
//! by `CONSOLED_OAUTH_TIMEOUT_SECONDS`. Codes, tokens and state values are never logged.

mod accounts;
mod claims;
mod client;
mod github;
mod google;
pub mod oidc;
pub mod policy;
mod provider;

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::app::{App, Reply};
use crate::crypto::{b64url, constant_time_eq, new_token, sha256, token_hash};
use crate::db;
use crate::db::oauth_states::{self, NewState, StoredState};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::cookies::SetCookie;
use crate::http::json::Email;
use crate::http::{percent_encode, Request, Response};
use crate::limits::Bucket;
pub use provider::Provider;

/// The cookie that binds an attempt to the browser that started it.
pub const STATE_COOKIE: &str = "svc_oauth";
const STATE_COOKIE_PATH: &str = "/auth/oauth";
const STATE_LIFETIME: Duration = Duration::from_secs(600);

/// What a provider tells us about the person signing in.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Google `sub`, GitHub numeric id.
    pub subject: String,
    pub email: Option<Email>,
    /// Whether the provider asserts that the person controls `email`.
    pub email_verified: bool,
    pub name: String,
}

/// Why a callback did not sign anyone in. `reason` is for the log only and never carries a
/// secret; the browser learns only `code` (docs/API.md, "Sign-in redirect errors").
#[derive(Debug)]
pub struct Declined {
    code: &'static str,
    reason: String,
}

impl Declined {
    fn new(code: &'static str, reason: impl Into<String>) -> Declined {
        Declined {
            code,
            reason: reason.into(),
        }
    }

    pub fn failed(reason: impl Into<String>) -> Declined {
        Declined::new("oauth_failed", reason)
    }

    /// The provider gave no address it has verified: the person may not own it, so the
    /// identity may neither create, enter nor be linked to an account.
    pub fn unverified(reason: impl Into<String>) -> Declined {
        Declined::new("email_unverified", reason)
    }

    /// The provider vouches for the person, but its rules here keep them out: an address
    /// outside its domains, a required claim missing.
    pub fn not_allowed(reason: impl Into<String>) -> Declined {
        Declined::new("not_allowed", reason)
    }

    /// The address signs in only through another provider (`policy`).
    pub fn sso_required(reason: impl Into<String>) -> Declined {
        Declined::new("sso_required", reason)
    }

    /// An OpenID Connect provider that has not answered its discovery yet.
    fn unavailable() -> Declined {
        Declined::new(
            "provider_unavailable",
            "the provider has not answered its discovery yet",
        )
    }

    /// A new account the sign-up policy refuses (`auth::signup_policy`): `signup_closed` or
    /// `domain_not_allowed`, the codes of a refused password sign-up.
    pub fn signup_refused(e: ApiError) -> Declined {
        match e.code {
            Code::SignupClosed | Code::DomainNotAllowed => Declined {
                code: e.code.as_str(),
                reason: "the sign-up policy refuses a new account".into(),
            },
            _ => Declined::from(e),
        }
    }

    fn denied() -> Declined {
        Declined::new("oauth_denied", "the user declined at the provider")
    }

    pub fn code(&self) -> &'static str {
        self.code
    }
}

impl From<ApiError> for Declined {
    fn from(e: ApiError) -> Declined {
        // The one place a provider's user is signed in refuses a disabled account
        // (`auth::create_session_cookie`); the console is told why.
        if e.code == Code::AccountDisabled {
            return Declined::new("account_disabled", "the account is disabled");
        }
        let detail = e.more.log_detail.clone();
        Declined::failed(detail.unwrap_or_else(|| e.code.as_str().to_string()))
    }
}

impl From<postgres::Error> for Declined {
    fn from(e: postgres::Error) -> Declined {
        Declined::from(ApiError::from(e))
    }
}

/// `GET /auth/providers`: the providers a sign-in may start with, sorted, and the name of each
/// for its button.
pub fn providers(app: &App, _req: &Request) -> ApiResult<Reply> {
    let listed = Provider::listed(app);
    let names: Vec<&str> = listed.iter().map(Provider::name).collect();
    let display: Map<String, Value> = listed
        .iter()
        .map(|p| (p.name().to_string(), p.display_name().into()))
        .collect();
    let body = json!({ "providers": names, "display_names": display });
    Ok(Response::json(200, &body).into())
}

/// The provider named by `/auth/oauth/{provider}/...`, if it is configured; else 404.
fn enabled<'a>(app: &'a App, req: &Request) -> ApiResult<Provider<'a>> {
    req.path
        .split('/')
        .nth(3)
        .and_then(|name| Provider::find(app, name))
        .ok_or_else(|| ApiError::new(Code::NotFound))
}

/// The client and endpoints to use: configured for Google and GitHub, discovered for an OpenID
/// Connect provider (`None` until it has answered).
fn endpoints(provider: Provider) -> Option<(crate::config::ProviderConfig, Option<Discovery>)> {
    match provider {
        Provider::Github(config) | Provider::Google(config) => Some((config.clone(), None)),
        Provider::Oidc(oidc_provider) => {
            let d = oidc_provider.discovered()?;
            Some((d.endpoints.clone(), Some(d)))
        }
    }
}

type Discovery = std::sync::Arc<oidc::Discovered>;

/// `GET /auth/oauth/{provider}/start`: 302 to the provider's authorization page.
pub fn start(app: &App, req: &Request) -> ApiResult<Reply> {
    let provider = enabled(app, req)?;
    let Some((config, _)) = endpoints(provider) else {
        // Not an event: anyone may ask, as often as they like, and the discovery's own log line
        // says what the operator needs to know.
        return Ok(login_page(app, &Declined::unavailable()).into());
    };
    let binding = new_token();
    let nonce = provider.uses_nonce().then(new_token);
    let attempt = NewState {
        state: &new_token(),
        binding: &binding,
        provider: provider.name(),
        pkce_verifier: &new_token(),
        nonce: nonce.as_deref(),
        lifetime: STATE_LIFETIME,
    };
    store_attempt(app, req, &attempt)?;
    let location = authorization_url(app, provider, &config, &attempt);
    let cookie = state_cookie(app, &binding, STATE_LIFETIME.as_secs());
    Ok(Response::redirect(&location)
        .header("Set-Cookie", cookie)
        .into())
}

/// Counts the start against the client's limit, drops abandoned attempts, stores this one.
fn store_attempt(app: &App, req: &Request, attempt: &NewState) -> ApiResult<()> {
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let bucket = Bucket::OAuthStart(req.client(&app.config.client_source));
    crate::admission::Budgets::new(&app.config.limits).take(&mut tx, &bucket)?;
    oauth_states::purge_expired(&mut tx)?;
    oauth_states::insert(&mut tx, attempt)?;
    tx.commit()?;
    Ok(())
}

fn authorization_url(
    app: &App,
    provider: Provider,
    config: &crate::config::ProviderConfig,
    attempt: &NewState,
) -> String {
    let mut params = vec![
        ("client_id", config.client_id.clone()),
        ("redirect_uri", redirect_uri(app, provider)),
        ("response_type", "code".into()),
        ("scope", provider.scope().into()),
        ("state", attempt.state.to_string()),
        ("code_challenge", pkce_challenge(attempt.pkce_verifier)),
        ("code_challenge_method", "S256".into()),
    ];
    if let Some(nonce) = attempt.nonce {
        params.push(("nonce", nonce.to_string()));
    }
    let separator = if config.auth_url.contains('?') {
        '&'
    } else {
        '?'
    };
    format!("{}{separator}{}", config.auth_url, query_string(&params))
}

/// `GET /auth/oauth/{provider}/callback`: 302 to the console, signed in or refused.
pub fn callback(app: &App, req: &Request) -> ApiResult<Reply> {
    let provider = enabled(app, req)?;
    let response = match complete(app, req, provider) {
        Ok(response) => response,
        Err(refusal) => refuse(app, req, provider, &refusal),
    };
    // The attempt is used up either way; the browser may drop its binding cookie.
    Ok(response
        .header("Set-Cookie", state_cookie(app, "", 0))
        .into())
}

/// A refusal: logged as a security event, answered with a redirect to the console's login page.
fn refuse(app: &App, req: &Request, provider: Provider, refusal: &Declined) -> Response {
    let fields = [
        ("provider", provider.name().into()),
        ("reason", refusal.code().into()),
        ("detail", refusal.reason.as_str().into()),
    ];
    crate::auth::audit(
        app,
        req,
        crate::auth::Event::ProviderSigninFailed,
        None,
        &fields,
    );
    login_page(app, refusal)
}

/// The console's login page, told why.
fn login_page(app: &App, refusal: &Declined) -> Response {
    let url = format!("{}/login?error={}", app.config.console_url, refusal.code());
    Response::redirect(&url)
}

fn complete(app: &App, req: &Request, provider: Provider) -> Result<Response, Declined> {
    // Consumed before anything else, so that no outcome leaves it usable.
    let stored = take_state(app, req)?;
    let (config, discovered) = endpoints(provider).ok_or_else(Declined::unavailable)?;
    if let (Provider::Oidc(oidc_provider), Some(d)) = (provider, &discovered) {
        oidc::signin::check_response_issuer(req, oidc_provider, d)?;
    }
    if let Some(error) = req.query_param("error") {
        return Err(if error == "access_denied" {
            Declined::denied()
        } else {
            Declined::failed(format!("provider error {:?}", printable(&error)))
        });
    }
    let stored = stored.ok_or_else(|| Declined::failed("missing or unknown state"))?;
    check_state(req, provider, &stored)?;
    let code = req
        .query_param("code")
        .filter(|c| !c.is_empty() && c.len() <= 2048)
        .ok_or_else(|| Declined::failed("missing code"))?;
    let exchange = client::Exchange {
        config: &config,
        auth: provider.token_auth(),
        code: &code,
        redirect_uri: redirect_uri(app, provider),
        verifier: &stored.pkce_verifier,
        timeout: app.config.oauth_timeout,
    };
    let nonce = stored.nonce.as_deref();
    let identity = match (provider, &discovered) {
        (Provider::Google(_), _) => google::identity(&exchange, nonce)?,
        (Provider::Github(_), _) => github::identity(&exchange)?,
        (Provider::Oidc(oidc_provider), Some(d)) => {
            let nonce = nonce.ok_or_else(|| Declined::failed("state without nonce"))?;
            oidc::signin::identity(oidc_provider, d, &exchange, nonce)?
        }
        (Provider::Oidc(_), None) => return Err(Declined::unavailable()),
    };
    accounts::sign_in(app, req, provider, &identity)
}

/// Deletes and returns the attempt named by the `state` parameter, if any.
fn take_state(app: &App, req: &Request) -> Result<Option<StoredState>, Declined> {
    let Some(state) = req.query_param("state").filter(|s| s.len() <= 256) else {
        return Ok(None);
    };
    let mut c = db::conn(&app.pool)?;
    Ok(oauth_states::take(&mut *c, &state)?)
}

/// The attempt must be this provider's (mix-up defence), this browser's, and not expired.
fn check_state(req: &Request, provider: Provider, stored: &StoredState) -> Result<(), Declined> {
    if stored.provider != provider.name() {
        return Err(Declined::failed(format!(
            "state of provider {} used on {provider}",
            stored.provider
        )));
    }
    let binding = req
        .cookie(STATE_COOKIE)
        .ok_or_else(|| Declined::failed("no binding cookie"))?;
    if !constant_time_eq(&token_hash(&binding), &stored.binding_hash) {
        return Err(Declined::failed("binding cookie does not match the state"));
    }
    if stored.expired {
        return Err(Declined::failed("state expired"));
    }
    Ok(())
}

/// `{CONSOLED_BASE_URL}/auth/oauth/{p}/callback`: from configuration, never from `Host`.
fn redirect_uri(app: &App, provider: Provider) -> String {
    format!("{}/auth/oauth/{provider}/callback", app.config.base_url)
}

/// RFC 7636 S256: BASE64URL(SHA-256(ASCII(code_verifier))).
pub fn pkce_challenge(verifier: &str) -> String {
    b64url(&sha256(verifier.as_bytes()))
}

fn query_string(params: &[(&str, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn state_cookie(app: &App, value: &str, max_age: u64) -> String {
    SetCookie {
        name: STATE_COOKIE,
        value,
        http_only: true,
        // Lax, not Strict: the cookie must come along on the top-level redirect back from the
        // provider's site.
        same_site: "Lax",
        secure: app.config.cookie_secure,
        path: STATE_COOKIE_PATH,
        max_age: Some(max_age),
    }
    .render()
}

/// Text from a provider, safe for a log line: short, without control characters.
pub(crate) fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_rfc7636_appendix_b() {
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn printable_strips_control_characters() {
        assert_eq!(printable("bad\r\nline"), "badline");
        assert_eq!(printable(&"x".repeat(100)).len(), 64);
    }
}
