//! Who may do what in an organization and its projects: the one place where a signed-in user's
//! membership is looked up and weighed against what an operation needs. Every handler that touches
//! an organization, a project or what belongs to them (tokens, members, invitations) asks here
//! first and acts only on the `Membership` it gets back.
//!
//! The answers: an organization the user does not belong to, or a project in one, is 404
//! `not_found`, exactly as an id that does not exist (an outsider learns nothing about other
//! organizations); a role too low, or an organization whose status forbids the operation, is 403
//! `forbidden`. The rules themselves are the pure table `decide`, tested as a table.

mod rules;

use crate::db::orgs::{self, Project};
use crate::db::Sql;
use crate::error::{ApiError, ApiResult, Code};

pub use rules::{admits, decide, Forbidden, Operation};

/// A member's role, weakest first: each role may do what the ones before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Viewer,
    Member,
    Admin,
    Owner,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Member, Role::Admin, Role::Owner];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Member => "member",
            Role::Admin => "admin",
            Role::Owner => "owner",
        }
    }

    /// The role of a stored or requested name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// An organization's status (`organizations.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Active,
    Suspended,
    Closed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Suspended => "suspended",
            Status::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        [Status::Active, Status::Suspended, Status::Closed]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// A user's membership in one organization, as read for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub user_id: i64,
    pub org_id: i64,
    pub personal: bool,
    pub role: Role,
    pub status: Status,
}

impl Membership {
    /// Ok when this member may take `operation` in the organization; else the 403 that says why.
    pub fn may(&self, operation: Operation) -> ApiResult<()> {
        decide(self.role, self.status, self.personal, operation).map_err(Forbidden::into_error)
    }
}

/// The user's membership in `org_id`, allowed to take `operation`: 404 when the user is not a
/// member (or there is no such organization), 403 when the role or status forbids it.
pub fn org(
    c: &mut impl Sql,
    user_id: i64,
    org_id: i64,
    operation: Operation,
) -> ApiResult<Membership> {
    let member = membership(c, user_id, org_id)?.ok_or_else(not_found)?;
    member.may(operation)?;
    Ok(member)
}

/// The project `project_id` and the user's membership in its organization, allowed to take
/// `operation`: 404 when there is no such project or the user is not a member of its organization.
pub fn project(
    c: &mut impl Sql,
    user_id: i64,
    project_id: i64,
    operation: Operation,
) -> ApiResult<(Project, Membership)> {
    let project = orgs::find_project(c, project_id)?.ok_or_else(not_found)?;
    let member = membership(c, user_id, project.org_id)?.ok_or_else(not_found)?;
    member.may(operation)?;
    Ok((project, member))
}

/// The membership as stored, without any rule applied.
pub fn membership(
    c: &mut impl Sql,
    user_id: i64,
    org_id: i64,
) -> Result<Option<Membership>, postgres::Error> {
    let row = c.query_opt(
        "SELECT o.kind, m.role, o.status
           FROM memberships m JOIN organizations o ON o.id = m.org_id
          WHERE m.user_id = $1 AND m.org_id = $2",
        &[&user_id, &org_id],
    )?;
    Ok(row.map(|r| {
        let kind: String = r.get(0);
        let role: String = r.get(1);
        let status: String = r.get(2);
        Membership {
            user_id,
            org_id,
            personal: kind == "personal",
            // The table's CHECK constraints admit only these names.
            role: Role::parse(&role).unwrap_or(Role::Viewer),
            status: Status::parse(&status).unwrap_or(Status::Suspended),
        }
    }))
}

fn not_found() -> ApiError {
    ApiError::new(Code::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_order_from_weakest_and_round_trip() {
        assert!(Role::Viewer < Role::Member && Role::Member < Role::Admin);
        assert!(Role::Admin < Role::Owner);
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(Role::parse("Owner"), None);
        assert_eq!(Status::parse("closed"), Some(Status::Closed));
        assert_eq!(Status::parse("gone"), None);
    }
}
