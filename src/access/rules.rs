//! The rules of `access` as a pure table: a role, an organization's status and kind, and an
//! operation in; allowed or the reason for a refusal out. No database, no request: tested as a
//! table.

use serde_json::json;

use super::{Role, Status};
use crate::error::{ApiError, Code};

/// What a member asks to do in an organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
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
    /// Make or unmake owners, remove an owner, invite an owner.
    ManageOwners,
    /// Leave the organization (one's own membership): any role, whatever the status.
    Leave,
}

impl Operation {
    /// The weakest role that may take the operation.
    pub fn needs(self) -> Role {
        match self {
            Operation::Read | Operation::Leave => Role::Viewer,
            Operation::ReadTokens | Operation::ManageTokens => Role::Member,
            Operation::ManageProjects | Operation::Rename | Operation::ManageMembers => Role::Admin,
            Operation::ManageOwners => Role::Owner,
        }
    }

    fn is_membership(self) -> bool {
        matches!(
            self,
            Operation::ManageMembers | Operation::ManageOwners | Operation::Leave
        )
    }

    /// Whether a suspended or closed organization allows it: reading it, and leaving it.
    fn allowed_when_inactive(self) -> bool {
        matches!(self, Operation::Read | Operation::Leave)
    }

    /// What changing a member's role from `from` to `to` is: owners alone make or unmake
    /// owners; below owner, it is managing members.
    pub fn role_change(from: Role, to: Role) -> Operation {
        if from == Role::Owner || to == Role::Owner {
            Operation::ManageOwners
        } else {
            Operation::ManageMembers
        }
    }

    /// What removing a member of `role` (not oneself) is: an owner only by an owner.
    pub fn removal(role: Role) -> Operation {
        Operation::role_change(role, Role::Viewer)
    }
}

/// Why an operation is refused (each a 403 `forbidden`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forbidden {
    /// The member's role is below the one the operation needs.
    Role { needs: Role },
    /// The organization is suspended or closed: it can be seen, nothing in it changed.
    Status(Status),
    /// A personal organization has exactly one member, its owner.
    Personal,
}

impl Forbidden {
    pub fn into_error(self) -> ApiError {
        let (message, details) = match self {
            Forbidden::Role { needs } => (
                format!(
                    "Your role does not allow this; it needs {}.",
                    needs.as_str()
                ),
                json!({ "needed_role": needs.as_str() }),
            ),
            Forbidden::Status(status) => (
                format!("The organization is {}.", status.as_str()),
                json!({ "org_status": status.as_str() }),
            ),
            Forbidden::Personal => (
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
/// `operation`.
pub fn decide(
    role: Role,
    status: Status,
    personal: bool,
    operation: Operation,
) -> Result<(), Forbidden> {
    if status != Status::Active && !operation.allowed_when_inactive() {
        return Err(Forbidden::Status(status));
    }
    if personal && operation.is_membership() {
        return Err(Forbidden::Personal);
    }
    if role < operation.needs() {
        return Err(Forbidden::Role {
            needs: operation.needs(),
        });
    }
    Ok(())
}

/// Whether an organization of `status` (personal or not) takes a new member through an accepted
/// invitation: only an active team.
pub fn admits(status: Status, personal: bool) -> Result<(), Forbidden> {
    if status != Status::Active {
        return Err(Forbidden::Status(status));
    }
    if personal {
        return Err(Forbidden::Personal);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operation::*;

    /// Each operation against each role in an active team organization: `x` allowed, `.` refused.
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
            (Leave, "xxxx"),
        ];
        for (operation, expected) in table {
            let got: String = Role::ALL
                .iter()
                .map(|&r| match decide(r, Status::Active, false, operation) {
                    Ok(()) => 'x',
                    Err(_) => '.',
                })
                .collect();
            assert_eq!(got, expected, "{operation:?}");
        }
    }

    #[test]
    fn an_inactive_organization_is_only_read_and_left() {
        for status in [Status::Suspended, Status::Closed] {
            assert_eq!(decide(Role::Owner, status, false, Read), Ok(()));
            assert_eq!(decide(Role::Viewer, status, false, Leave), Ok(()));
            for operation in [
                ReadTokens,
                ManageTokens,
                ManageProjects,
                Rename,
                ManageMembers,
                ManageOwners,
            ] {
                assert_eq!(
                    decide(Role::Owner, status, false, operation),
                    Err(Forbidden::Status(status))
                );
            }
        }
    }

    #[test]
    fn a_personal_organization_takes_no_members_and_cannot_be_left() {
        for operation in [ManageMembers, ManageOwners, Leave] {
            assert_eq!(
                decide(Role::Owner, Status::Active, true, operation),
                Err(Forbidden::Personal)
            );
        }
        assert_eq!(
            decide(Role::Owner, Status::Active, true, ManageProjects),
            Ok(())
        );
    }

    #[test]
    fn only_an_active_team_takes_new_members() {
        assert_eq!(admits(Status::Active, false), Ok(()));
        assert_eq!(admits(Status::Active, true), Err(Forbidden::Personal));
        for status in [Status::Suspended, Status::Closed] {
            assert_eq!(admits(status, false), Err(Forbidden::Status(status)));
        }
    }

    /// Each (from, to) role change: `O` needs an owner, `A` an admin.
    #[test]
    fn only_owners_make_or_unmake_owners() {
        let table = [
            //            to: viewer member admin owner
            (Role::Viewer, "AAAO"),
            (Role::Member, "AAAO"),
            (Role::Admin, "AAAO"),
            (Role::Owner, "OOOO"),
        ];
        for (from, expected) in table {
            let got: String = Role::ALL
                .iter()
                .map(|&to| match Operation::role_change(from, to) {
                    ManageOwners => 'O',
                    ManageMembers => 'A',
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(got, expected, "from {from:?}");
        }
        assert_eq!(Operation::removal(Role::Owner), ManageOwners);
        assert_eq!(Operation::removal(Role::Admin), ManageMembers);
    }

    #[test]
    fn a_refusal_is_403_forbidden_naming_the_role_needed() {
        let e = Forbidden::Role { needs: Role::Admin }.into_error();
        assert_eq!(e.code.status(), 403);
        assert_eq!(e.body()["error"]["code"], "forbidden");
        assert_eq!(e.body()["error"]["details"]["needed_role"], "admin");
    }
}
