//! The mails: subject, a few sentences and at most one link, as plain text and HTML.

use crate::db::mail_tokens::Purpose;

/// A rendered mail: a few sentences around at most one link.
pub(super) struct Mail {
    pub(super) subject: &'static str,
    /// Owned: some mails name what they are about (an invitation's organization).
    pub(super) intro: String,
    pub(super) link: String,
    pub(super) outro: &'static str,
    /// Lines of facts after the intro (the time and client of a change), for the kinds that
    /// report one (`notices`).
    pub(super) facts: Vec<String>,
}

impl Mail {
    pub(super) fn text(&self) -> String {
        let facts: String = self.facts.iter().map(|f| format!("{f}\n")).collect();
        let facts = if facts.is_empty() {
            facts
        } else {
            format!("{facts}\n")
        };
        format!(
            "Hello,\n\n{}\n\n{facts}{}\n\n{}\n",
            self.intro, self.link, self.outro
        )
    }

    pub(super) fn html(&self) -> String {
        let link = html_escape(&self.link);
        let facts: String = self
            .facts
            .iter()
            .map(|f| format!("<li>{}</li>", html_escape(f)))
            .collect();
        let facts = if facts.is_empty() {
            facts
        } else {
            format!("<ul>{facts}</ul>\n")
        };
        format!(
            "<!DOCTYPE html>\n<html><body>\n<p>Hello,</p>\n<p>{}</p>\n{facts}<p><a href=\"{link}\">{link}</a></p>\n<p>{}</p>\n</body></html>\n",
            html_escape(&self.intro),
            html_escape(self.outro)
        )
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The purpose and console page of the kinds whose mail carries a token.
pub(super) fn token_kind(kind: &str) -> Option<(Purpose, &'static str)> {
    match kind {
        "verify_email" => Some((Purpose::VerifyEmail, "verify-email")),
        "password_reset" => Some((Purpose::PasswordReset, "reset-password")),
        "email_change" => Some((Purpose::EmailChange, "change-email")),
        _ => None,
    }
}

/// The invitation mail: who invites to which organization, with which role (`org_name` `None`:
/// an operator's invitation to sign up).
pub(super) fn invitation(link: String, invite: &crate::db::invitations::Mailing) -> Mail {
    let intro = match &invite.org_name {
        Some(org) => format!(
            "{} invited you to join the organization \"{org}\" on the console, as {}. To \
             accept, open this link (sign in, or make an account with this address):",
            invite.inviter.as_deref().unwrap_or("Someone"),
            invite.role.as_str()
        ),
        None => "You are invited to make an account on the console. To sign up with this \
                 address, open this link:"
            .to_string(),
    };
    Mail {
        subject: "You are invited to the console",
        intro,
        link,
        outro: "The link works once and expires in 7 days. If you did not expect this \
                invitation, ignore this mail.",
        facts: Vec::new(),
    }
}

/// The mail of an outbox kind; `link` is the token link for kinds that have one.
pub(super) fn template(
    kind: &str,
    console_url: &str,
    link: Option<String>,
    details: Option<&serde_json::Value>,
) -> Option<Mail> {
    let sign_in = format!("{console_url}/login");
    let mail = match kind {
        "verify_email" => Mail {
            subject: "Confirm your email address",
            intro: "Please confirm the email address of your console account by opening this link:"
                .into(),
            link: link?,
            outro:
                "The link works once and expires in 24 hours. If you did not create an account, \
                    ignore this mail.",
            facts: Vec::new(),
        },
        "password_reset" => Mail {
            subject: "Reset your password",
            intro: "Someone asked to reset the password of your console account. To choose a new \
                    password, open this link:"
                .into(),
            link: link?,
            outro: "The link works once and expires in 1 hour; a newer reset mail replaces it. \
                    Resetting signs out every session. If you did not ask for this, ignore this \
                    mail: your password stays as it is.",
            facts: Vec::new(),
        },
        "mfa_enabled" => Mail {
            subject: "Two-factor sign-in was enabled",
            intro: "Two-factor sign-in was enabled on your console account. If this wasn't you, \
                    reset your password now from the sign-in page:"
                .into(),
            link: sign_in,
            outro: "If it was you, there is nothing to do.",
            facts: Vec::new(),
        },
        "mfa_recovery_codes" => Mail {
            subject: "New recovery codes were made",
            intro: "New two-factor recovery codes were made for your console account; the old \
                    ones no longer work. If this wasn't you, reset your password now from the \
                    sign-in page:"
                .into(),
            link: sign_in,
            outro: "If it was you, there is nothing to do.",
            facts: Vec::new(),
        },
        "password_changed" => Mail {
            subject: "Your password was changed",
            intro: "The password of your console account was changed (or set, on an account that \
                    had none), and every other session of the account was signed out. If this \
                    wasn't you, reset your password now from the sign-in page:"
                .into(),
            link: sign_in,
            outro: "If it was you, there is nothing to do.",
            facts: Vec::new(),
        },
        "mfa_removed" => Mail {
            subject: "Two-factor sign-in was removed",
            intro: "The address of your console account was just confirmed (a password reset, or \
                    a sign-in through Google or GitHub), and the two-factor sign-in that had been \
                    set up before the address was confirmed was removed: whoever set it up had \
                    not shown that the address is theirs. Set it up again from your account once \
                    you are signed in:"
                .into(),
            link: sign_in,
            outro: "If you set it up yourself before confirming the address, this is why it is \
                    gone.",
            facts: Vec::new(),
        },
        "mfa_disabled" => Mail {
            subject: "Two-factor sign-in was disabled",
            intro: "Two-factor sign-in was disabled on your console account. If this wasn't you, \
                    reset your password now from the sign-in page:"
                .into(),
            link: sign_in,
            outro: "If it was you, there is nothing to do.",
            facts: Vec::new(),
        },
        _ => return super::notices::template(kind, console_url, link, details),
    };
    Some(mail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_template_and_token_kinds_need_their_link() {
        for kind in [
            "verify_email",
            "password_reset",
            "mfa_enabled",
            "mfa_disabled",
            "mfa_removed",
            "mfa_recovery_codes",
            "password_changed",
        ] {
            let mail = template(
                kind,
                "https://c.example",
                Some("https://c.example/x".into()),
                None,
            )
            .unwrap_or_else(|| panic!("{kind}"));
            assert!(mail.text().contains("https://c.example/"), "{kind}");
            assert!(mail.html().contains("<a href="), "{kind}");
        }
        assert!(template("verify_email", "https://c.example", None, None).is_none());
        assert!(template("mfa_enabled", "https://c.example", None, None).is_some());
        assert!(template("unknown", "https://c.example", None, None).is_none());
    }

    #[test]
    fn an_invitation_names_the_organization_role_and_inviter_and_escapes_them() {
        let invite = crate::db::invitations::Mailing {
            org_name: Some("<Acme>".into()),
            role: crate::access::Role::Admin,
            inviter: Some("Ada".into()),
        };
        let mail = invitation("https://c.example/invitation?token=t".into(), &invite);
        assert!(mail
            .text()
            .contains("Ada invited you to join the organization \"<Acme>\""));
        assert!(mail.text().contains("as admin"));
        assert!(mail.html().contains("&lt;Acme&gt;") && !mail.html().contains("<Acme>"));
    }
}
