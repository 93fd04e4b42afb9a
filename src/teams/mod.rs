//! Teams under `/v1`: organizations (`orgs`), their members (`members`) and invitations
//! (`invitations`), and projects (`projects`), one file per resource.
//!
//! Every handler here does the same four things in order: it authenticates the request (a full
//! session: `signed_in`, first), reads its input, asks `crate::access` about the organization or
//! project its path names (404 `not_found` for one the user does not belong to, exactly as for
//! one that does not exist; 403 `forbidden` for a role too low or a status that forbids it), and
//! acts in one transaction. The tables' triggers announce each change in that transaction, so a
//! change rolled back is never announced, and membership changes reach every instance's
//! streams at once (docs/events.md).

pub mod invitations;
pub mod members;
pub mod orgs;
pub mod projects;

use serde_json::Value;

use crate::access::Role;
use crate::app::{App, Reply};
use crate::auth;
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::Fields;
use crate::http::{Request, Response};

/// The signed-in user (a full session): every handler here asks first.
fn signed_in(app: &App, req: &Request) -> ApiResult<i64> {
    Ok(auth::require_session(app, req)?.user_id)
}

/// The id in the request path's segment `n` (`/v1/organizations/{3}/members/{5}`). Anything but
/// a positive number names nothing: 404, as an id that does not exist.
fn path_id(req: &Request, n: usize) -> ApiResult<i64> {
    req.path
        .split('/')
        .nth(n)
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::new(Code::NotFound))
}

/// A role field: one of `owner`, `admin`, `member`, `viewer`.
fn role_field(fields: &Fields, name: &str) -> ApiResult<Role> {
    Role::parse(fields.string(name)?)
        .ok_or_else(|| ApiError::invalid(name, "one of owner, admin, member, viewer"))
}

fn json(status: u16, body: &Value) -> ApiResult<Reply> {
    Ok(Response::json(status, body).into())
}

fn no_content() -> ApiResult<Reply> {
    Ok(Response::empty(204).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Method;

    #[test]
    fn only_positive_numbers_name_something() {
        let id = |path: &str| path_id(&Request::new(Method::Get, path), 3).ok();
        assert_eq!(id("/v1/organizations/12"), Some(12));
        assert_eq!(id("/v1/organizations/12/members/5"), Some(12));
        for bad in ["0", "-1", "+1", "1e3", "x", "99999999999999999999", ""] {
            assert_eq!(id(&format!("/v1/organizations/{bad}")), None, "{bad}");
        }
    }
}
