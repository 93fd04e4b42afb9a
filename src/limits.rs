//! Every rate limit of the service, in one place: which events a bucket counts, its limit, its
//! window and the setting that overrides it. A bucket's key is formatted here and nowhere else;
//! the table in the README is generated from `Kind::ALL` (a test compares them).

use std::time::Duration;

use crate::http::client::Client;
use crate::http::json::Email;

/// A kind of bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    LoginFailuresPerClient,
    LoginFailuresPerAccountAndClient,
    LoginFailuresPerAccount,
    DeviceCookieFailures,
    SignupsPerClient,
    OAuthStartsPerClient,
    ResetMailsPerAddressAndClient,
    ResetMailsPerClient,
    VerifyMailsPerMinute,
    VerifyMailsPerDay,
    WrongCodesPerUser,
    EmailChangesPerUser,
    InvitationsPerOrg,
    OrgsPerUser,
}

/// The fixed facts of a kind: key prefix, default limit, window, setting, what it counts.
pub struct Rule {
    pub prefix: &'static str,
    pub limit: i64,
    pub window: Duration,
    pub setting: Option<&'static str>,
    pub counts: &'static str,
}

const fn mins(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::LoginFailuresPerClient,
        Kind::LoginFailuresPerAccountAndClient,
        Kind::LoginFailuresPerAccount,
        Kind::DeviceCookieFailures,
        Kind::SignupsPerClient,
        Kind::OAuthStartsPerClient,
        Kind::ResetMailsPerAddressAndClient,
        Kind::ResetMailsPerClient,
        Kind::VerifyMailsPerMinute,
        Kind::VerifyMailsPerDay,
        Kind::WrongCodesPerUser,
        Kind::EmailChangesPerUser,
        Kind::InvitationsPerOrg,
        Kind::OrgsPerUser,
    ];

    pub const fn rule(self) -> Rule {
        let (prefix, limit, window, setting, counts) = match self {
            // 50 in 15 minutes: a person mistyping fails a few times; an office behind one NAT
            // address rarely fails 50 times in a quarter hour, while a guesser spraying many
            // accounts from one address is held to 200 guesses an hour instead of thousands.
            Kind::LoginFailuresPerClient => (
                "login-client",
                50,
                mins(15),
                Some("CONSOLED_LOGIN_FAILURES_PER_CLIENT"),
                "failed sign-ins from one client address, any accounts (not with a device cookie)",
            ),
            Kind::LoginFailuresPerAccountAndClient => (
                "login-account-client",
                10,
                mins(15),
                Some("CONSOLED_LOGIN_FAILURES_PER_ACCOUNT_AND_CLIENT"),
                "failed sign-ins to one account from one client address (not with a device cookie)",
            ),
            Kind::LoginFailuresPerAccount => (
                "login-account",
                100,
                mins(15),
                Some("CONSOLED_LOGIN_FAILURES_PER_ACCOUNT"),
                "failed sign-ins to one account from anywhere (not with a device cookie)",
            ),
            Kind::DeviceCookieFailures => (
                "device",
                5,
                Duration::from_secs(30 * 24 * 3600),
                Some("CONSOLED_DEVICE_COOKIE_FAILURES"),
                "failed sign-ins with one device cookie; at the limit the cookie is void",
            ),
            Kind::SignupsPerClient => (
                "signup",
                30,
                mins(5),
                Some("CONSOLED_SIGNUPS_PER_CLIENT"),
                "sign-ups from one client address",
            ),
            Kind::OAuthStartsPerClient => (
                "oauth-start",
                100,
                mins(10),
                Some("CONSOLED_OAUTH_STARTS_PER_CLIENT"),
                "Google/GitHub sign-in starts from one client address",
            ),
            // No cap per address alone: a stranger could use it up and silence the owner's own
            // reset mail. Past either cap the request writes nothing.
            Kind::ResetMailsPerAddressAndClient => (
                "reset-mail",
                3,
                mins(60),
                None,
                "password-reset mails to one address asked for from one client address (past it, silently not sent)",
            ),
            Kind::ResetMailsPerClient => (
                "reset-mail-client",
                20,
                mins(60),
                None,
                "password-reset mails asked for from one client address, any addresses (past it, silently not sent)",
            ),
            Kind::VerifyMailsPerMinute => (
                "verify-resend-minute",
                1,
                mins(1),
                None,
                "verification mail resends per user",
            ),
            Kind::VerifyMailsPerDay => (
                "verify-resend-day",
                5,
                mins(24 * 60),
                None,
                "verification mail resends per user",
            ),
            Kind::WrongCodesPerUser => (
                "totp",
                20,
                mins(60),
                None,
                "wrong second-factor codes per user (TOTP and recovery codes)",
            ),
            // Each request mails an address the user chose: a cap keeps an account from being
            // a way to mail strangers.
            Kind::EmailChangesPerUser => (
                "email-change",
                5,
                mins(24 * 60),
                None,
                "email-change requests per user (each mails the new address)",
            ),
            // Each invitation mails an address chosen by the inviter: an organization must not
            // be a way to mail strangers in bulk.
            Kind::InvitationsPerOrg => (
                "invite-org",
                50,
                mins(60),
                Some("CONSOLED_INVITATIONS_PER_ORG"),
                "invitations made in one organization (by its members; the operator's command is not counted)",
            ),
            Kind::OrgsPerUser => (
                "org-create",
                20,
                mins(60),
                Some("CONSOLED_ORGS_PER_USER"),
                "team organizations created by one user",
            ),
        };
        Rule {
            prefix,
            limit,
            window,
            setting,
            counts,
        }
    }

    fn index(self) -> usize {
        Kind::ALL.iter().position(|k| *k == self).expect("listed")
    }
}

/// The limits in force: the defaults with the configured overrides.
#[derive(Clone, Debug)]
pub struct Limits {
    values: [i64; Kind::ALL.len()],
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            values: Kind::ALL.map(|k| k.rule().limit),
        }
    }
}

impl Limits {
    /// `setting(name, default)` reads one override (the configuration's parser).
    pub fn from_settings<E>(
        mut setting: impl FnMut(&'static str, i64) -> Result<i64, E>,
    ) -> Result<Limits, E> {
        let mut limits = Limits::default();
        for kind in Kind::ALL {
            let rule = kind.rule();
            if let Some(name) = rule.setting {
                limits.values[kind.index()] = setting(name, rule.limit)?;
            }
        }
        Ok(limits)
    }

    pub fn limit(&self, kind: Kind) -> i64 {
        self.values[kind.index()]
    }

    /// Settings whose value is below 1 (a limit of 0 would refuse everyone).
    pub fn invalid(&self) -> Option<&'static str> {
        Kind::ALL
            .into_iter()
            .find(|k| self.limit(*k) < 1)
            .and_then(|k| k.rule().setting)
    }
}

/// One bucket: a kind and whom it counts.
#[derive(Clone, Copy, Debug)]
pub enum Bucket<'a> {
    LoginClient(Client),
    LoginAccountClient(&'a Email, Client),
    LoginAccount(&'a Email),
    Signup(Client),
    OAuthStart(Client),
    ResetMailAddressClient(&'a Email, Client),
    ResetMailClient(Client),
    VerifyMailsPerMinute(i64),
    VerifyMailsPerDay(i64),
    WrongCodes(i64),
    EmailChanges(i64),
    Invitations(i64),
    OrgsCreated(i64),
}

impl Bucket<'_> {
    pub fn kind(&self) -> Kind {
        match self {
            Bucket::LoginClient(_) => Kind::LoginFailuresPerClient,
            Bucket::LoginAccountClient(..) => Kind::LoginFailuresPerAccountAndClient,
            Bucket::LoginAccount(_) => Kind::LoginFailuresPerAccount,
            Bucket::Signup(_) => Kind::SignupsPerClient,
            Bucket::OAuthStart(_) => Kind::OAuthStartsPerClient,
            Bucket::ResetMailAddressClient(..) => Kind::ResetMailsPerAddressAndClient,
            Bucket::ResetMailClient(_) => Kind::ResetMailsPerClient,
            Bucket::VerifyMailsPerMinute(_) => Kind::VerifyMailsPerMinute,
            Bucket::VerifyMailsPerDay(_) => Kind::VerifyMailsPerDay,
            Bucket::WrongCodes(_) => Kind::WrongCodesPerUser,
            Bucket::EmailChanges(_) => Kind::EmailChangesPerUser,
            Bucket::Invitations(_) => Kind::InvitationsPerOrg,
            Bucket::OrgsCreated(_) => Kind::OrgsPerUser,
        }
    }

    /// The key of its rows in `rate_events`.
    pub fn key(&self) -> String {
        let prefix = self.kind().rule().prefix;
        match self {
            Bucket::LoginClient(c)
            | Bucket::Signup(c)
            | Bucket::OAuthStart(c)
            | Bucket::ResetMailClient(c) => format!("{prefix}:{c}"),
            // The address first: `account_keys` deletes an account's buckets by prefix.
            Bucket::LoginAccountClient(email, c) | Bucket::ResetMailAddressClient(email, c) => {
                format!("{prefix}:{}:{c}", email.as_str())
            }
            Bucket::LoginAccount(email) => format!("{prefix}:{}", email.as_str()),
            Bucket::VerifyMailsPerMinute(user)
            | Bucket::VerifyMailsPerDay(user)
            | Bucket::WrongCodes(user)
            | Bucket::EmailChanges(user)
            | Bucket::OrgsCreated(user) => format!("{prefix}:{user}"),
            Bucket::Invitations(org) => format!("{prefix}:{org}"),
        }
    }

    pub fn window(&self) -> Duration {
        self.kind().rule().window
    }
}

/// The failed-sign-in buckets of one account: its own key and the prefix of its per-client
/// keys (an address has no ':'), for forgetting them after a password reset.
pub fn account_keys(email: &Email) -> (String, String) {
    let prefix = Kind::LoginFailuresPerAccountAndClient.rule().prefix;
    (
        Bucket::LoginAccount(email).key(),
        format!("{prefix}:{}:", email.as_str()),
    )
}

/// Every bucket that counts what one account did or had done to it, as (exact keys, key
/// prefixes): what its export shows and its deletion forgets. The per-client buckets of its
/// address are prefixes (the address first); buckets of a client address alone are not the
/// account's.
pub fn keys_of_account(email: &Email, user_id: i64) -> (Vec<String>, Vec<String>) {
    let (own, per_client) = account_keys(email);
    let exact = vec![
        own,
        Bucket::VerifyMailsPerMinute(user_id).key(),
        Bucket::VerifyMailsPerDay(user_id).key(),
        Bucket::WrongCodes(user_id).key(),
        Bucket::EmailChanges(user_id).key(),
        Bucket::OrgsCreated(user_id).key(),
    ];
    let reset = Kind::ResetMailsPerAddressAndClient.rule().prefix;
    let prefixes = vec![per_client, format!("{reset}:{}:", email.as_str())];
    (exact, prefixes)
}

/// The README's table of limits.
pub fn markdown_table() -> String {
    let mut out = String::from("| limit | counts | window | setting |\n|---|---|---|---|\n");
    for kind in Kind::ALL {
        let r = kind.rule();
        let window = match r.window.as_secs() {
            s if s % 86400 == 0 => format!("{} d", s / 86400),
            s if s % 3600 == 0 => format!("{} h", s / 3600),
            s => format!("{} min", s / 60),
        };
        let setting = r.setting.map_or("fixed".to_string(), |s| format!("`{s}`"));
        out.push_str(&format!(
            "| {} | {} | {window} | {setting} |\n",
            r.limit, r.counts
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_distinct_and_keys_use_them() {
        let mut prefixes: Vec<_> = Kind::ALL.iter().map(|k| k.rule().prefix).collect();
        prefixes.sort();
        prefixes.dedup();
        assert_eq!(prefixes.len(), Kind::ALL.len());
        let email = Email::parse("a@example.com").unwrap();
        let client = Client::of(Some("1.2.3.4".parse().unwrap()));
        assert_eq!(
            Bucket::LoginAccountClient(&email, client).key(),
            "login-account-client:a@example.com:1.2.3.4"
        );
        let (own, per_client) = account_keys(&email);
        assert_eq!(own, "login-account:a@example.com");
        assert!(Bucket::LoginAccountClient(&email, client)
            .key()
            .starts_with(&per_client));
    }

    #[test]
    fn overrides_apply_to_settable_limits_only() {
        let limits = Limits::from_settings(|name, default| {
            Ok::<_, ()>(if name == "CONSOLED_LOGIN_FAILURES_PER_CLIENT" {
                7
            } else {
                default
            })
        })
        .unwrap();
        assert_eq!(limits.limit(Kind::LoginFailuresPerClient), 7);
        assert_eq!(limits.limit(Kind::WrongCodesPerUser), 20);
        assert!(limits.invalid().is_none());
    }

    /// The README's table is this module's, byte for byte.
    #[test]
    fn the_readme_lists_every_limit() {
        let readme = include_str!("../README.md");
        let table = markdown_table();
        assert!(
            readme.contains(&table),
            "README's table of limits is out of date; it must read:\n{table}"
        );
    }
}
