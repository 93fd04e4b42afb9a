//! The operator's team commands: `org suspend`, `org resume` and `invitation create`. Each is a
//! security event marked `by=operator`, as `mfa reset` is.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::access::{Role, Status};
use crate::config::Config;
use crate::db::{invitations, orgs, outbox};
use crate::failure::Failure;
use crate::http::json::Email;
use crate::logging::security::{self, Event};

/// `consoled org suspend --id ID`: the organization can be read, nothing in it changed; its
/// changes reach no stream and its projects' API tokens are refused, on every instance at once.
pub fn suspend(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    set_status(config, flags, Status::Suspended)
}

/// `consoled org resume --id ID`: a suspended organization is active again. A closed one stays
/// closed.
pub fn resume(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    set_status(config, flags, Status::Active)
}

fn set_status(
    config: &Config,
    flags: &HashMap<String, String>,
    status: Status,
) -> Result<Value, Failure> {
    let id = super::id_flag(flags, "id")?;
    let mut c = super::connect(config)?;
    let db = |e: postgres::Error| e.to_string();
    let mut tx = c.transaction().map_err(db)?;
    let before = orgs::lock_status(&mut tx, id)
        .map_err(db)?
        .ok_or_else(|| format!("organization {id} does not exist"))?;
    if before == Status::Closed {
        return Err(
            format!("organization {id} is closed; a closed organization stays closed").into(),
        );
    }
    orgs::set_status(&mut tx, id, status).map_err(db)?;
    tx.commit().map_err(db)?;
    if before != status {
        let event = match status {
            Status::Active => Event::OrganizationResumed,
            _ => Event::OrganizationSuspended,
        };
        let fields = [("org_id", id.into()), ("by", "operator".into())];
        security::event(event, None, None, &fields);
    }
    Ok(json!({ "id": id, "status": status.as_str(), "changed": before != status }))
}

/// `consoled invitation create --email ADDRESS [--org ID [--role ROLE]]`: an invitation mailed
/// as an owner's would be (not counted against the organization's limit). Without `--org`, an
/// invitation to make an account, for `CONSOLED_SIGNUP=invite`.
pub fn invite(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let raw = flags.get("email").map_or("", String::as_str);
    let email =
        Email::parse(raw).map_err(|_| format!("--email {raw:?} is not an email address"))?;
    let org = super::opt_id_flag(flags, "org")?;
    let role = match flags.get("role") {
        None => Role::Member,
        Some(r) => Role::parse(r)
            .ok_or_else(|| format!("--role {r:?}: one of owner, admin, member, viewer"))?,
    };
    if org.is_none() && flags.contains_key("role") {
        return Err("--role needs --org (an invitation without one is to make an account)".into());
    }
    let mut c = super::connect(config)?;
    let db = |e: postgres::Error| e.to_string();
    let mut tx = c.transaction().map_err(db)?;
    if let Some(org_id) = org {
        match orgs::status_of(&mut tx, org_id).map_err(db)? {
            None => return Err(format!("organization {org_id} does not exist").into()),
            Some((_, true)) => {
                return Err(
                    format!("organization {org_id} is personal: it takes no members").into(),
                )
            }
            Some((status, false)) if status != Status::Active => {
                return Err(format!("organization {org_id} is {}", status.as_str()).into())
            }
            Some(_) => {}
        }
    }
    let invitation = invitations::create(&mut tx, org, &email, role, None).map_err(db)?;
    outbox::enqueue_invitation(&mut tx, invitation.id, email.as_str()).map_err(db)?;
    tx.commit().map_err(db)?;
    let mut fields = vec![
        ("invitation_id", invitation.id.into()),
        ("by", "operator".into()),
    ];
    if let Some(org_id) = org {
        fields.push(("org_id", org_id.into()));
    }
    security::event(Event::MemberInvited, None, None, &fields);
    let mut out = invitation.to_json();
    if org.is_none() {
        out["role"] = Value::Null;
    }
    Ok(out)
}
