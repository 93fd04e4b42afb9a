//! The mails of an account's life (issue 32): the link that changes the address, and the notices
//! that report a change with its facts (when, from which client, the new address), which the
//! outbox row carries as `details`.

use serde_json::Value;

use super::templates::Mail;

/// The mail of one of these kinds; `None` for another kind, or a link kind without its link.
pub(super) fn template(
    kind: &str,
    console_url: &str,
    link: Option<String>,
    details: Option<&Value>,
) -> Option<Mail> {
    let sign_in = format!("{console_url}/login");
    let mail = match kind {
        "email_change" => Mail {
            subject: "Confirm your new email address",
            intro: "Someone signed in to a console account asked to move it to this address. To \
                    confirm the address and make the change, open this link:"
                .into(),
            link: link?,
            outro: "The link works once and expires in 24 hours; a newer request replaces it. \
                    Until it is opened the account keeps its current address. If you did not \
                    ask for this, ignore this mail.",
            facts: Vec::new(),
        },
        // The new address has an account already: its owner learns that someone tried, the
        // one who asked learns nothing (the answer was the same).
        "email_change_taken" => Mail {
            subject: "Someone tried to use your email address",
            intro: "Someone signed in to another console account asked to move it to this \
                    address. An account with this address exists already, so nothing was \
                    changed. Your account is here:"
                .into(),
            link: sign_in,
            outro: "There is nothing to do.",
            facts: Vec::new(),
        },
        "email_changed" => Mail {
            subject: "Your email address was changed",
            intro: "The email address of your console account was changed; mail for the account \
                    now goes to the new address."
                .into(),
            link: sign_in,
            outro: "If this wasn't you, someone else controls your account: tell the console's \
                    operator at once.",
            facts: facts(details),
        },
        "account_deleted" => Mail {
            subject: "Your console account was deleted",
            intro: "Your console account was deleted, with its sessions, its personal \
                    organization and that organization's projects. To use the console again, \
                    sign up anew:"
                .into(),
            link: console_url.to_string(),
            outro: "If this wasn't you, tell the console's operator.",
            facts: facts(details),
        },
        _ => return None,
    };
    Some(mail)
}

/// The facts a notice reports, one line each, from what the outbox row says.
fn facts(details: Option<&Value>) -> Vec<String> {
    let Some(d) = details else {
        return Vec::new();
    };
    let text = |key: &str| d.get(key).and_then(Value::as_str);
    let mut lines = Vec::new();
    if let Some(email) = text("new_email") {
        lines.push(format!("New address: {email}"));
    }
    if let Some(at) = text("at") {
        lines.push(format!("When: {at} (UTC)"));
    }
    match (text("by"), text("client"), text("agent")) {
        (Some("operator"), ..) => lines.push("By: the console's operator".to_string()),
        (_, client, agent) if client.is_some() || agent.is_some() => lines.push(format!(
            "From: {} ({})",
            client.unwrap_or("an unknown address"),
            agent.unwrap_or("Unknown")
        )),
        _ => {}
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn notices_carry_their_facts_and_the_link_kind_needs_its_link() {
        let details = json!({"new_email": "new@example.com", "at": "2026-11-27T10:00:00Z",
                             "client": "192.0.2.7", "agent": "Firefox on Linux"});
        let mail = template("email_changed", "https://c.example", None, Some(&details)).unwrap();
        let text = mail.text();
        for needle in [
            "New address: new@example.com",
            "When: 2026-11-27T10:00:00Z (UTC)",
            "From: 192.0.2.7 (Firefox on Linux)",
            "https://c.example/login",
        ] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
        assert!(mail
            .html()
            .contains("<li>New address: new@example.com</li>"));
        let by = json!({"at": "2026-11-27T10:00:00Z", "by": "operator"});
        let deleted = template("account_deleted", "https://c.example", None, Some(&by)).unwrap();
        assert!(deleted.text().contains("By: the console's operator"));
        assert!(template("email_change", "https://c.example", None, None).is_none());
        let link = Some("https://c.example/change-email?token=t".to_string());
        assert!(template("email_change", "https://c.example", link, None).is_some());
        assert!(template("email_change_taken", "https://c.example", None, None).is_some());
        assert!(template("other", "https://c.example", None, None).is_none());
    }
}
