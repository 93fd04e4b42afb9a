//! Routing: one table of (method, path pattern, handler), and the one dispatch function that
//! applies the cross-cutting rules in order: 404/405, CSRF and media type for requests that change
//! state under /auth and /v1, then the handler, then a new CSRF cookie when the answer (or the
//! refusal) set or cleared the session cookie. A `*` in a pattern matches one path segment.

use crate::app::{App, Reply};
use crate::auth;
use crate::demo;
use crate::error::{ApiError, ApiResult, Code};
use crate::http::{csrf, Method, Request, Response};
use crate::identity;
use crate::ops;
use crate::subscribe;
use crate::teams;
use crate::tokens;

pub type Handler = fn(&App, &Request) -> ApiResult<Reply>;

/// A route's screen: a look at a request, from memory only (no database, no waiting), that may
/// refuse it before it meets a worker. It runs on the connection's thread, before the CSRF and
/// media-type rules; the handler must not rely on it (a screen may race) and decides again.
pub type Screen = fn(&App, &Request) -> ApiResult<()>;

pub struct Route {
    pub method: Method,
    pub pattern: &'static str,
    /// Label for metrics and logs (never the raw path, which may carry tokens).
    pub name: &'static str,
    pub handler: Handler,
    pub screen: Option<Screen>,
}

const fn route(
    method: Method,
    pattern: &'static str,
    name: &'static str,
    handler: Handler,
) -> Route {
    Route {
        method,
        pattern,
        name,
        handler,
        screen: None,
    }
}

impl Route {
    const fn screened(self, screen: Screen) -> Route {
        Route {
            screen: Some(screen),
            ..self
        }
    }
}

use Method::{Delete, Get, Head, Patch, Post};

pub static ROUTES: &[Route] = &[
    route(Get, "/", "demo", demo::index),
    // Where the verification and reset mails link to (`{CONSOLED_CONSOLE_URL}/...`): the demo
    // finishes what the mails start; a real console front end serves these paths itself.
    route(Get, "/verify-email", "demo_verify_email", demo::index),
    route(Get, "/reset-password", "demo_reset_password", demo::index),
    // Where an external sign-in ends (`{CONSOLED_CONSOLE_URL}/login?error=...`, `/login/mfa`).
    route(Get, "/login", "demo_login", demo::index),
    route(Get, "/login/mfa", "demo_login_mfa", demo::index),
    route(Get, "/invitation", "demo_invitation", demo::index),
    route(Get, "/auth/csrf", "csrf", auth::csrf::get),
    route(Get, "/auth/providers", "providers", auth::oauth::providers),
    route(
        Get,
        "/auth/oauth/*/start",
        "oauth_start",
        auth::oauth::start,
    ),
    route(
        Get,
        "/auth/oauth/*/callback",
        "oauth_callback",
        auth::oauth::callback,
    ),
    route(Post, "/auth/signup", "signup", auth::signup::post).screened(auth::hash_screen),
    route(Post, "/auth/login", "login", auth::login::post).screened(auth::login::screen),
    route(Post, "/auth/logout", "logout", auth::login::logout),
    route(Get, "/auth/session", "session", auth::login::get),
    route(Get, "/auth/check", "check", identity::check::get),
    // The same without a body, for proxies: nginx keeps its connection to an `auth_request`
    // upstream only when the answer has no body to skip (`identity::check`).
    route(Head, "/auth/check", "check", identity::check::get),
    route(Post, "/auth/mfa/totp", "mfa_totp", auth::mfa::complete),
    route(Post, "/auth/mfa/totp/setup", "mfa_setup", auth::mfa::setup),
    route(
        Post,
        "/auth/mfa/totp/enable",
        "mfa_enable",
        auth::mfa::enable,
    ),
    route(
        Post,
        "/auth/mfa/totp/disable",
        "mfa_disable",
        auth::mfa::disable,
    ),
    route(
        Post,
        "/auth/mfa/recovery-codes",
        "mfa_recovery_codes",
        auth::mfa::regenerate,
    ),
    route(
        Post,
        "/auth/verify-email",
        "verify_email",
        auth::email::verify,
    ),
    route(
        Post,
        "/auth/verify-email/resend",
        "verify_email_resend",
        auth::email::resend,
    ),
    route(
        Post,
        "/auth/password/forgot",
        "password_forgot",
        auth::email::forgot,
    ),
    route(
        Post,
        "/auth/password/reset",
        "password_reset",
        auth::email::reset,
    )
    .screened(auth::hash_screen),
    route(
        Post,
        "/auth/password/change",
        "password_change",
        auth::password::change,
    )
    .screened(auth::hash_screen),
    route(Get, "/auth/sessions", "sessions", auth::own_sessions::list),
    route(
        Delete,
        "/auth/sessions",
        "sessions_end_others",
        auth::own_sessions::delete_others,
    ),
    route(
        Delete,
        "/auth/sessions/*",
        "session_end",
        auth::own_sessions::delete_one,
    ),
    // The account's whole life (issue 32): profile, address, export, deletion; the mailed link
    // of an address change opens the demo as the other mails' links do.
    route(
        Patch,
        "/auth/account",
        "account_update",
        auth::account::patch,
    ),
    route(
        Delete,
        "/auth/account",
        "account_delete",
        auth::account::delete,
    ),
    route(
        Get,
        "/auth/account/export",
        "account_export",
        auth::account::export,
    ),
    route(
        Post,
        "/auth/account/email",
        "email_change",
        auth::email_change::request,
    ),
    route(
        Post,
        "/auth/account/email/confirm",
        "email_change_confirm",
        auth::email_change::confirm,
    ),
    route(Get, "/change-email", "demo_change_email", demo::index),
    route(Get, STREAM_PATH, "events", subscribe::get),
    // Teams (issue 32): organizations, members, invitations, projects (`crate::teams`).
    route(Get, "/v1/organizations", "orgs", teams::orgs::list),
    route(Post, "/v1/organizations", "org_create", teams::orgs::create),
    route(Get, "/v1/organizations/*", "org", teams::orgs::get),
    route(
        Patch,
        "/v1/organizations/*",
        "org_rename",
        teams::orgs::rename,
    ),
    route(
        Get,
        "/v1/organizations/*/members",
        "members",
        teams::members::list,
    ),
    route(
        Patch,
        "/v1/organizations/*/members/*",
        "member_role",
        teams::members::change_role,
    ),
    route(
        Delete,
        "/v1/organizations/*/members/*",
        "member_remove",
        teams::members::remove,
    ),
    route(
        Get,
        "/v1/organizations/*/invitations",
        "invitations",
        teams::invitations::list,
    ),
    route(
        Post,
        "/v1/organizations/*/invitations",
        "invite",
        teams::invitations::create,
    ),
    route(
        Delete,
        "/v1/organizations/*/invitations/*",
        "invitation_cancel",
        teams::invitations::cancel,
    ),
    route(
        Post,
        "/v1/invitations/accept",
        "invitation_accept",
        teams::invitations::accept,
    ),
    route(
        Get,
        "/v1/organizations/*/projects",
        "projects",
        teams::projects::list,
    ),
    route(
        Post,
        "/v1/organizations/*/projects",
        "project_create",
        teams::projects::create,
    ),
    route(Get, "/v1/projects/*", "project", teams::projects::get),
    route(
        Patch,
        "/v1/projects/*",
        "project_rename",
        teams::projects::rename,
    ),
    route(
        Delete,
        "/v1/projects/*",
        "project_delete",
        teams::projects::delete,
    ),
    route(Get, "/v1/projects/*/tokens", "tokens", tokens::list),
    route(
        Post,
        "/v1/projects/*/tokens",
        "token_create",
        tokens::create,
    ),
    route(
        Delete,
        "/v1/projects/*/tokens/*",
        "token_revoke",
        tokens::revoke,
    ),
    route(Get, "/healthz", "healthz", ops::healthz),
    route(Get, "/readyz", "readyz", ops::readyz),
    route(Get, "/metrics", "metrics", ops::metrics),
    route(Get, "/openapi.json", "openapi", ops::openapi),
];

/// Test hook (CONSOLED_TEST_PANIC_ROUTE): proves that a panicking handler becomes a 500.
static PANIC_ROUTE: Route = route(Get, "/__panic", "panic", |_, _| panic!("panic route"));

pub fn matches(pattern: &str, path: &str) -> bool {
    let mut p = pattern.split('/');
    let mut s = path.split('/');
    loop {
        match (p.next(), s.next()) {
            (None, None) => return true,
            (Some("*"), Some(seg)) if !seg.is_empty() => {}
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

/// The route for a request, or the error that answers it (404, or 405 with `Allow`).
pub fn find<'a>(app: &App, req: &Request) -> Result<&'a Route, ApiError> {
    if app.config.panic_route && req.path == PANIC_ROUTE.pattern {
        return Ok(&PANIC_ROUTE);
    }
    let candidates: Vec<&Route> = ROUTES
        .iter()
        .filter(|r| matches(r.pattern, &req.path))
        .collect();
    if candidates.is_empty() {
        return Err(ApiError::new(Code::NotFound));
    }
    candidates
        .iter()
        .find(|r| r.method == req.method)
        .copied()
        .ok_or_else(|| {
            let allow: Vec<&str> = candidates.iter().map(|r| method_name(r.method)).collect();
            ApiError::method_not_allowed(&allow)
        })
}

pub fn method_name(m: Method) -> &'static str {
    match m {
        Method::Get => "GET",
        Method::Head => "HEAD",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Patch => "PATCH",
        Method::Delete => "DELETE",
        Method::Options => "OPTIONS",
        Method::Other => "OTHER",
    }
}

/// The change stream's path (`GET /v1/events`).
pub const STREAM_PATH: &str = "/v1/events";

/// Whether the request is for the change stream: its handler runs on the connection's own thread,
/// which then becomes the stream's, instead of a worker (the server's `conn`): a stream opening
/// costs no hand-over to a worker and back. The handler waits on nothing but the stream openers
/// (`events::openings`), which bound the database work.
pub fn runs_on_its_connection(req: &Request) -> bool {
    req.path == STREAM_PATH
}

/// Runs a request through the rules and its handler. Returns the route name for metrics.
pub fn dispatch(app: &App, req: &Request) -> (&'static str, ApiResult<Reply>) {
    let route = match find(app, req) {
        Ok(r) => r,
        Err(e) => return ("unmatched", Err(e)),
    };
    let result = guard(app, req).and_then(|()| (route.handler)(app, req));
    (route.name, auth::csrf::follow_session(app, result))
}

/// The answer of the request's route's screen when it refuses the request (`Screen`), with the
/// route's name.
pub fn screen(app: &App, req: &Request) -> Option<(&'static str, ApiError)> {
    let route = find(app, req).ok()?;
    let screen = route.screen?;
    screen(app, req).err().map(|e| (route.name, e))
}

/// Whether a request may change state: every method but GET, HEAD and OPTIONS.
pub fn changes_state(method: Method) -> bool {
    !matches!(method, Method::Get | Method::Head | Method::Options)
}

/// Rules every request that changes state under /auth or /v1 obeys before its handler runs:
/// CSRF and `Origin` (the console's own requests carry the session cookie), then the media type.
fn guard(app: &App, req: &Request) -> ApiResult<()> {
    let ours = req.path.starts_with("/auth/") || req.path.starts_with("/v1/");
    if changes_state(req.method) && ours {
        let session = auth::session_token(req);
        let ended = || {
            session
                .as_deref()
                .is_some_and(|t| auth::session_ended(app, t))
        };
        csrf::check(req, &app.origins, &app.csrf_key, session.as_deref(), ended)?;
        req.require_json()?;
    }
    Ok(())
}

/// Adds the headers every response carries.
pub fn finish(req_path: &str, mut response: Response) -> Response {
    if req_path.starts_with("/auth/") || req_path == "/auth" {
        response
            .headers
            .push(("Cache-Control".into(), "no-store".into()));
    }
    response
        .headers
        .push(("X-Content-Type-Options".into(), "nosniff".into()));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(matches("/auth/csrf", "/auth/csrf"));
        assert!(!matches("/auth/csrf", "/auth/csrf/"));
        assert!(!matches("/auth/csrf", "/auth"));
        assert!(matches("/auth/oauth/*/start", "/auth/oauth/google/start"));
        assert!(!matches("/auth/oauth/*/start", "/auth/oauth//start"));
        assert!(!matches("/auth/oauth/*/start", "/auth/oauth/a/b/start"));
    }

    #[test]
    fn routes_are_unique() {
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                assert!(
                    !(a.method == b.method && a.pattern == b.pattern),
                    "{}",
                    a.pattern
                );
            }
        }
    }
}
