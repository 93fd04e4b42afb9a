//! The mails: subject, a few sentences and at most one link, as plain text and HTML.

use crate::db::mail_tokens::Purpose;

/// A rendered mail: a few sentences around at most one link.
pub(super) struct Mail {
    pub(super) subject: &'static str,
    pub(super) intro: &'static str,
    pub(super) link: String,
    pub(super) outro: &'static str,
}

impl Mail {
    pub(super) fn text(&self) -> String {
        format!(
            "Hello,\n\n{}\n\n{}\n\n{}\n",
            self.intro, self.link, self.outro
        )
    }

    pub(super) fn html(&self) -> String {
        let link = html_escape(&self.link);
        format!(
            "<!DOCTYPE html>\n<html><body>\n<p>Hello,</p>\n<p>{}</p>\n<p><a href=\"{link}\">{link}</a></p>\n<p>{}</p>\n</body></html>\n",
            html_escape(self.intro),
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
        _ => None,
    }
}

/// The mail of an outbox kind; `link` is the token link for kinds that have one.
pub(super) fn template(kind: &str, console_url: &str, link: Option<String>) -> Option<Mail> {
    let sign_in = format!("{console_url}/login");
    let mail = match kind {
        "verify_email" => Mail {
            subject: "Confirm your email address",
            intro: "Please confirm the email address of your console account by opening this link:",
            link: link?,
            outro:
                "The link works once and expires in 24 hours. If you did not create an account, \
                    ignore this mail.",
        },
        "password_reset" => Mail {
            subject: "Reset your password",
            intro: "Someone asked to reset the password of your console account. To choose a new \
                    password, open this link:",
            link: link?,
            outro: "The link works once and expires in 1 hour; a newer reset mail replaces it. \
                    Resetting signs out every session. If you did not ask for this, ignore this \
                    mail: your password stays as it is.",
        },
        "mfa_enabled" => Mail {
            subject: "Two-factor sign-in was enabled",
            intro: "Two-factor sign-in was enabled on your console account. If this wasn't you, \
                    reset your password now from the sign-in page:",
            link: sign_in,
            outro: "If it was you, there is nothing to do.",
        },
        "mfa_recovery_codes" => Mail {
            subject: "New recovery codes were made",
            intro: "New two-factor recovery codes were made for your console account; the old \
                    ones no longer work. If this wasn't you, reset your password now from the \
                    sign-in page:",
            link: sign_in,
            outro: "If it was you, there is nothing to do.",
        },
        "password_changed" => Mail {
            subject: "Your password was changed",
            intro: "The password of your console account was changed (or set, on an account that \
                    had none), and every other session of the account was signed out. If this \
                    wasn't you, reset your password now from the sign-in page:",
            link: sign_in,
            outro: "If it was you, there is nothing to do.",
        },
        "mfa_removed" => Mail {
            subject: "Two-factor sign-in was removed",
            intro: "The address of your console account was just confirmed (a password reset, or \
                    a sign-in through Google or GitHub), and the two-factor sign-in that had been \
                    set up before the address was confirmed was removed: whoever set it up had \
                    not shown that the address is theirs. Set it up again from your account once \
                    you are signed in:",
            link: sign_in,
            outro: "If you set it up yourself before confirming the address, this is why it is \
                    gone.",
        },
        "mfa_disabled" => Mail {
            subject: "Two-factor sign-in was disabled",
            intro: "Two-factor sign-in was disabled on your console account. If this wasn't you, \
                    reset your password now from the sign-in page:",
            link: sign_in,
            outro: "If it was you, there is nothing to do.",
        },
        _ => return None,
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
            )
            .unwrap_or_else(|| panic!("{kind}"));
            assert!(mail.text().contains("https://c.example/"), "{kind}");
            assert!(mail.html().contains("<a href="), "{kind}");
        }
        assert!(template("verify_email", "https://c.example", None).is_none());
        assert!(template("mfa_enabled", "https://c.example", None).is_some());
        assert!(template("unknown", "https://c.example", None).is_none());
    }
}
