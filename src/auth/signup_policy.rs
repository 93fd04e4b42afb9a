//! Who may make an account: `CONSOLED_SIGNUP` (`open`, `invite` or `closed`) and
//! `CONSOLED_SIGNUP_DOMAINS` (the email domains allowed; none set: any). One decision, `admit`,
//! asked by sign-up with a password (`auth::signup`) and by a first sign-in through Google or
//! GitHub (`auth::oauth::accounts`) before either creates a user; existing accounts are never
//! affected.
//!
//! - `open`: anyone whose address is in an allowed domain.
//! - `invite`: only through an invitation: a password sign-up presents the mailed link (which
//!   proves the address); a provider sign-in is admitted when a live invitation names the address
//!   the provider verified.
//! - `closed`: nobody, not even with an invitation (invited people who have an account still
//!   accept it).
//!
//! The domain rule holds for everyone, invited or not: an invitation is made by an organization's
//! admin, the domains by the operator. Refusals are 403 `signup_closed` and `domain_not_allowed`.

use serde_json::json;

use crate::db::invitations::{self, Invitation};
use crate::db::Sql;
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::Email;

/// `CONSOLED_SIGNUP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Open,
    Invite,
    Closed,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Open => "open",
            Mode::Invite => "invite",
            Mode::Closed => "closed",
        }
    }
}

/// The sign-up policy in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub mode: Mode,
    /// Lower-case domains an address must be in (the part after `@`, exactly); empty: any.
    pub domains: Vec<String>,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            mode: Mode::Open,
            domains: Vec::new(),
        }
    }
}

impl Policy {
    /// From the two settings' values (unset: `None`); the error names the form expected.
    pub fn parse(
        mode: Option<&str>,
        domains: Option<&str>,
    ) -> Result<Policy, (&'static str, String)> {
        let mode = match mode.map(|m| m.trim().to_ascii_lowercase()).as_deref() {
            None | Some("open") => Mode::Open,
            Some("invite") => Mode::Invite,
            Some("closed") => Mode::Closed,
            Some(_) => return Err(("CONSOLED_SIGNUP", "open, invite or closed".into())),
        };
        let mut list = Vec::new();
        for d in domains.unwrap_or("").split(',').map(str::trim) {
            if d.is_empty() {
                continue;
            }
            let domain = d.trim_start_matches('@').to_ascii_lowercase();
            // A domain is what may follow `@` in an address we accept.
            if Email::parse(&format!("x@{domain}")).is_err() {
                let form = "comma-separated email domains, such as example.com,example.org";
                return Err(("CONSOLED_SIGNUP_DOMAINS", form.into()));
            }
            list.push(domain);
        }
        Ok(Policy {
            mode,
            domains: list,
        })
    }

    fn domain_allowed(&self, email: &Email) -> bool {
        let domain = email.as_str().rsplit('@').next().unwrap_or("");
        self.domains.is_empty() || self.domains.iter().any(|d| d == domain)
    }
}

/// Why a new account is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignupRefusal {
    /// The mode does not admit it (`closed`, or `invite` without an invitation).
    Closed(Mode),
    /// The address is outside the allowed domains.
    Domain,
}

impl SignupRefusal {
    /// The reason's name in the security log and the sign-in redirect (`error=`).
    pub fn code(self) -> &'static str {
        match self {
            SignupRefusal::Closed(_) => Code::SignupClosed.as_str(),
            SignupRefusal::Domain => Code::DomainNotAllowed.as_str(),
        }
    }

    pub fn into_error(self, policy: &Policy) -> ApiError {
        match self {
            SignupRefusal::Closed(Mode::Invite) => ApiError::new(Code::SignupClosed)
                .message("Sign-up needs an invitation: open the link in your invitation mail.")
                .with_details(json!({ "signup": "invite" })),
            SignupRefusal::Closed(mode) => {
                ApiError::new(Code::SignupClosed).with_details(json!({ "signup": mode.as_str() }))
            }
            SignupRefusal::Domain => ApiError::new(Code::DomainNotAllowed)
                .message(format!(
                    "Only addresses at {} can make an account here.",
                    policy.domains.join(", ")
                ))
                .with_details(json!({ "domains": policy.domains })),
        }
    }
}

/// The rule itself: whether an account for `email` may be made, `invited` or not.
pub fn decide(policy: &Policy, email: &Email, invited: bool) -> Result<(), SignupRefusal> {
    if policy.mode == Mode::Closed {
        return Err(SignupRefusal::Closed(Mode::Closed));
    }
    if !policy.domain_allowed(email) {
        return Err(SignupRefusal::Domain);
    }
    if policy.mode == Mode::Invite && !invited {
        return Err(SignupRefusal::Closed(Mode::Invite));
    }
    Ok(())
}

/// What stands for the newcomer besides the address.
#[derive(Debug, Clone, Copy)]
pub enum Evidence<'a> {
    /// A password sign-up, with the token of a mailed invitation link or without.
    Link(Option<&'a str>),
    /// An address an identity provider has verified: a live invitation of it admits.
    VerifiedAddress,
}

/// Whether a new account for `email` may be made: the policy's answer (`decide`), with the
/// invitation looked up. A link that is not a live invitation of this address is 400 whatever
/// the mode. Returns the invitation a link named (the caller uses it up in the transaction that
/// creates the user).
pub fn admit(
    c: &mut impl Sql,
    policy: &Policy,
    email: &Email,
    evidence: Evidence,
) -> ApiResult<Option<Invitation>> {
    let (invited, invitation) = match evidence {
        Evidence::Link(Some(token)) => {
            let unusable = || ApiError::invalid("invitation", "unknown, used or expired");
            if !super::is_token_shaped(token) {
                return Err(unusable());
            }
            let invitation = invitations::find_live(c, token)?.ok_or_else(unusable)?;
            if invitation.email != email.as_str() {
                return Err(ApiError::invalid("email", "must be the invited address"));
            }
            (true, Some(invitation))
        }
        Evidence::Link(None) => (false, None),
        Evidence::VerifiedAddress => (
            policy.mode == Mode::Invite && invitations::live_for_address(c, email)?,
            None,
        ),
    };
    decide(policy, email, invited).map_err(|r| r.into_error(policy))?;
    Ok(invitation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: &str, domains: &str) -> Policy {
        Policy::parse(Some(mode), Some(domains)).unwrap()
    }

    #[test]
    fn settings_parse_and_refuse_nonsense() {
        assert_eq!(Policy::parse(None, None).unwrap(), Policy::default());
        let p = policy(" Invite ", " @Example.COM, corp.example.org ,");
        assert_eq!(p.mode, Mode::Invite);
        assert_eq!(p.domains, ["example.com", "corp.example.org"]);
        assert_eq!(
            Policy::parse(Some("maybe"), None).unwrap_err().0,
            "CONSOLED_SIGNUP"
        );
        for bad in ["example", "exa mple.com", "a@b.com", "*.example.com"] {
            let e = Policy::parse(None, Some(bad)).unwrap_err();
            assert_eq!(e.0, "CONSOLED_SIGNUP_DOMAINS", "{bad}");
        }
    }

    /// Each mode and domain rule, uninvited and invited: `x` admitted, `c` closed, `d` domain.
    #[test]
    fn the_rule_as_a_table() {
        let inside = Email::parse("ada@example.com").unwrap();
        let outside = Email::parse("ada@elsewhere.net").unwrap();
        let table = [
            ("open", "", "xxxx"),
            ("open", "example.com", "xxdd"),
            ("invite", "", "cxcx"),
            ("invite", "example.com", "cxdd"),
            ("closed", "", "cccc"),
            ("closed", "example.com", "cccc"),
        ];
        for (mode, domains, expected) in table {
            let p = policy(mode, domains);
            let got: String = [
                (&inside, false),
                (&inside, true),
                (&outside, false),
                (&outside, true),
            ]
            .into_iter()
            .map(|(email, invited)| match decide(&p, email, invited) {
                Ok(()) => 'x',
                Err(SignupRefusal::Closed(_)) => 'c',
                Err(SignupRefusal::Domain) => 'd',
            })
            .collect();
            assert_eq!(got, expected, "{mode} {domains:?}");
        }
    }

    #[test]
    fn refusals_are_403_with_their_own_codes() {
        let p = policy("invite", "example.com");
        let e = SignupRefusal::Closed(Mode::Invite).into_error(&p);
        assert_eq!((e.code.status(), e.code.as_str()), (403, "signup_closed"));
        assert!(e.more.message.contains("invitation"));
        let e = SignupRefusal::Domain.into_error(&p);
        assert_eq!(
            (e.code.status(), e.code.as_str()),
            (403, "domain_not_allowed")
        );
        assert!(e.more.message.contains("example.com"));
    }
}
