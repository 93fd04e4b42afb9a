//! The rules of `access` as a pure table: a role, an organization's status and kind, and an
//! action in; allowed or the reason for a refusal out. No database, no request: tested as a table.

use serde_json::json;

use super::{Role, Status};
use crate::error::{ApiError, Code};

/// What a member asks to do in an organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// See the organization, its projects and its members.
    Read,
    /// List a project's API tokens.
    ReadTokens,
    /// Create or revoke a project's API tokens.
    ManageTokens,
    /// Create, rename or delete projects.
    ManageProjects,
    /// Rename the organization.
    Rename,
    /// Invite, cancel invitations, change roles below owner, remove members who are not owners.
    ManageMembers,
    /// Make or unmake owners, remove an owner.
    ManageOwners,
}

impl Action {
    /// The weakest role that may take the action.
    pub fn needs(self) -> Role {
        match self {
            Action::Read => Role::Viewer,
            Action::ReadTokens | Action::ManageTokens => Role::Member,
            Action::ManageProjects | Action::Rename | Action::ManageMembers => Role::Admin,
            Action::ManageOwners => Role::Owner,
        }
    }

    fn is_membership(self) -> bool {
        matches!(self, Action::ManageMembers | Action::ManageOwners)
    }
}

/// Why an action is refused (each a 403 `forbidden`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The member's role is below the one the action needs.
    Role { needs: Role },
    /// The organization is suspended or closed: it can be seen, nothing in it changed.
    Status(Status),
    /// A personal organization has exactly one member, its owner.
    Personal,
}

impl Refusal {
    pub fn into_error(self) -> ApiError {
        let (message, details) = match self {
            Refusal::Role { needs } => (
                format!(
                    "Your role does not allow this; it needs {}.",
                    needs.as_str()
                ),
                json!({ "needed_role": needs.as_str() }),
            ),
            Refusal::Status(status) => (
                format!("The organization is {}.", status.as_str()),
                json!({ "org_status": status.as_str() }),
            ),
            Refusal::Personal => (
                "A personal organization has no other members.".to_string(),
                json!({ "org_kind": "personal" }),
            ),
        };
        ApiError::new(Code::Forbidden)
            .message(message)
            .with_details(details)
    }
}

/// Whether a member with `role` in an organization of `status` (personal or not) may take
/// `action`.
pub fn decide(role: Role, status: Status, personal: bool, action: Action) -> Result<(), Refusal> {
    if status != Status::Active && action != Action::Read {
        return Err(Refusal::Status(status));
    }
    if personal && action.is_membership() {
        return Err(Refusal::Personal);
    }
    if role < action.needs() {
        return Err(Refusal::Role {
            needs: action.needs(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;

    /// Each action against each role in an active team organization: `x` allowed, `.` refused.
    #[test]
    fn roles_in_an_active_team() {
        let table = [
            //                viewer member admin owner
            (Read, "xxxx"),
            (ReadTokens, ".xxx"),
            (ManageTokens, ".xxx"),
            (ManageProjects, "..xx"),
            (Rename, "..xx"),
            (ManageMembers, "..xx"),
            (ManageOwners, "...x"),
        ];
        for (action, expected) in table {
            let got: String = Role::ALL
                .iter()
                .map(|&r| match decide(r, Status::Active, false, action) {
                    Ok(()) => 'x',
                    Err(_) => '.',
                })
                .collect();
            assert_eq!(got, expected, "{action:?}");
        }
    }

    #[test]
    fn an_inactive_organization_is_only_read() {
        for status in [Status::Suspended, Status::Closed] {
            assert_eq!(decide(Role::Owner, status, false, Read), Ok(()));
            for action in [
                ReadTokens,
                ManageTokens,
                ManageProjects,
                Rename,
                ManageMembers,
            ] {
                assert_eq!(
                    decide(Role::Owner, status, false, action),
                    Err(Refusal::Status(status))
                );
            }
        }
    }

    #[test]
    fn a_personal_organization_takes_no_members() {
        assert_eq!(
            decide(Role::Owner, Status::Active, true, ManageMembers),
            Err(Refusal::Personal)
        );
        assert_eq!(
            decide(Role::Owner, Status::Active, true, ManageProjects),
            Ok(())
        );
    }

    #[test]
    fn a_refusal_is_403_forbidden_naming_the_role_needed() {
        let e = Refusal::Role { needs: Role::Admin }.into_error();
        assert_eq!(e.code.status(), 403);
        assert_eq!(e.body()["error"]["code"], "forbidden");
        assert_eq!(e.body()["error"]["details"]["needed_role"], "admin");
    }
}
