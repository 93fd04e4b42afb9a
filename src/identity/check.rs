//! `GET /auth/check`: the one question every other console service asks (through nginx
//! `auth_request`, Traefik `forwardAuth`, Caddy `forward_auth`, HAProxy, or directly): who is
//! calling, by the `svc_session` cookie or the `Authorization: Bearer` token of the original
//! request. 200 names the caller in `X-Consoled-*` headers (a proxy passes them on) and the same
//! in the body; 401 `unauthorized` or `mfa_required` refuses. For an original method that changes
//! state (`X-Original-Method` or `X-Forwarded-Method` other than GET, HEAD or OPTIONS), a session
//! must also pass the CSRF and `Origin` rules of /auth on the original request's headers (403
//! `csrf_invalid`), so a sibling service's POSTs are CSRF-checked here. A bearer token is not
//! sent by a browser on its own, so it needs none.

use serde_json::{json, Value};

use super::{By, Caller};
use crate::app::{App, Reply};
use crate::auth;
use crate::error::ApiResult;
use crate::http::{csrf, Method, Request, Response};
use crate::router::changes_state;

pub fn get(app: &App, req: &Request) -> ApiResult<Reply> {
    let caller = super::identify(app, req)?;
    if matches!(caller.by, By::Session { .. }) && changes_state_originally(req) {
        let session = auth::session_token(req);
        // The session was just found live, so a token bound to no session cannot pass.
        csrf::check(req, &app.origins, &app.csrf_key, session.as_deref(), || {
            false
        })?;
    }
    let mut response = Response::json(200, &body(&caller));
    for (name, value) in headers(&caller) {
        // A value a header cannot carry (an address with non-ASCII characters) is left to the
        // body; a proxy then passes the header on empty, which is to say not at all.
        if !value.is_empty() && value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
            response = response.header(name, value);
        }
    }
    Ok(response.into())
}

/// Whether the request being checked changes state, as the proxy names its method: any line
/// of either header naming another method than GET, HEAD or OPTIONS. The strictest wins, since a
/// proxy replaces the one it sets but passes a client's own line of the other on; none named
/// is a GET (a service asking for itself about a safe request).
fn changes_state_originally(req: &Request) -> bool {
    req.headers
        .iter()
        .filter(|(name, _)| name == "x-original-method" || name == "x-forwarded-method")
        .any(|(_, m)| changes_state(Method::parse(m.trim())))
}

/// The identity headers (docs/API.md, `GET /auth/check`).
pub fn headers(caller: &Caller) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(7);
    if let Some(user) = &caller.user {
        out.push(("X-Consoled-User", user.id.to_string()));
        out.push(("X-Consoled-Email", user.email.clone()));
    }
    match &caller.by {
        By::Session {
            public_id,
            auth_time,
            orgs,
            ..
        } => {
            out.push(("X-Consoled-Auth", "session".into()));
            out.push(("X-Consoled-Session", public_id.clone()));
            out.push(("X-Consoled-Auth-Time", auth_time.to_string()));
            let orgs: Vec<String> = orgs
                .iter()
                .map(|(id, role)| format!("{id}:{}", role.as_str()))
                .collect();
            out.push(("X-Consoled-Orgs", orgs.join(",")));
        }
        By::Token {
            id,
            project_id,
            scope,
        } => {
            out.push(("X-Consoled-Auth", "token".into()));
            out.push(("X-Consoled-Token", id.to_string()));
            out.push(("X-Consoled-Project", project_id.to_string()));
            out.push(("X-Consoled-Scope", scope.as_str().into()));
        }
    }
    out
}

fn body(caller: &Caller) -> Value {
    let user = caller.user.as_ref();
    let mut body = json!({
        "user_id": user.map(|u| u.id),
        "email": user.map(|u| u.email.as_str()),
    });
    let more = match &caller.by {
        By::Session {
            public_id,
            auth_time,
            orgs,
            ..
        } => {
            let orgs: Vec<Value> = orgs
                .iter()
                .map(|(id, role)| json!({ "id": id, "role": role.as_str() }))
                .collect();
            json!({ "auth": "session", "session_id": public_id, "auth_time": auth_time, "orgs": orgs })
        }
        By::Token {
            id,
            project_id,
            scope,
        } => json!({ "auth": "token", "token_id": id, "project_id": project_id, "scope": scope }),
    };
    if let (Some(b), Value::Object(m)) = (body.as_object_mut(), more) {
        b.extend(m);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Role;
    use crate::db::tokens::TokenScope;
    use crate::identity::CallerUser;

    #[test]
    fn a_session_is_named_with_its_sign_in_and_active_organizations() {
        let caller = Caller {
            user: Some(CallerUser {
                id: 7,
                email: "ada@example.com".into(),
            }),
            by: By::Session {
                id: 99,
                public_id: "ab".repeat(16),
                auth_time: 1_700_000_000,
                orgs: vec![(1, Role::Owner), (4, Role::Viewer)],
            },
        };
        let h: Vec<(&str, String)> = headers(&caller);
        let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("X-Consoled-User"), Some("7"));
        assert_eq!(get("X-Consoled-Auth"), Some("session"));
        assert_eq!(
            get("X-Consoled-Session"),
            Some("abababababababababababababababab")
        );
        assert_eq!(get("X-Consoled-Auth-Time"), Some("1700000000"));
        assert_eq!(get("X-Consoled-Orgs"), Some("1:owner,4:viewer"));
        assert_eq!(get("X-Consoled-Token"), None);
        let b = body(&caller);
        assert_eq!(b["orgs"][1], json!({"id": 4, "role": "viewer"}));
        assert_eq!(b["session_id"], "ab".repeat(16));
        assert!(
            !b.to_string().contains("99"),
            "the row id is never shown: {b}"
        );
    }

    #[test]
    fn a_token_is_named_by_id_project_and_scope() {
        let caller = Caller {
            user: None,
            by: By::Token {
                id: 3,
                project_id: 12,
                scope: TokenScope::Read,
            },
        };
        let names: Vec<&str> = headers(&caller).iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "X-Consoled-Auth",
                "X-Consoled-Token",
                "X-Consoled-Project",
                "X-Consoled-Scope"
            ]
        );
        let b = body(&caller);
        assert_eq!(b["user_id"], Value::Null);
        assert_eq!(
            (b["token_id"].clone(), b["scope"].clone()),
            (json!(3), json!("read"))
        );
    }
}
