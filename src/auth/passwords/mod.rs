//! The rules a new password obeys beyond its length (`http::json::Password`): at sign-up, reset
//! and change it must not be one of the most common passwords (OWASP ASVS 6.2.4, NIST SP
//! 800-63B's blocklist), nor the account's own email address, its local part or its name.
//!
//! The list is `common.txt` beside this file (its source and licence: `SOURCE.md`), compiled
//! into the binary and indexed once, on first use (or at start: `warm`), so a check is a
//! lower-casing and two binary searches: microseconds, before any hash and without the
//! database. The index is where each line starts, in the lines' order (77 KiB for the 19,640
//! lines): a `HashSet<&str>` of them held 557 KiB for as long as the process ran, an eighth of
//! an idle server's memory once its hash memory went (BENCHMARKS.md, "Idle memory"). A refusal
//! says why and never repeats or logs the password.

use std::sync::OnceLock;

use serde_json::json;

use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::Password;

/// One password a line, lower case, most frequent first.
static COMMON: &str = include_str!("common.txt");

/// Where each line of `COMMON` starts, sorted by the line.
fn common() -> &'static [u32] {
    static INDEX: OnceLock<Vec<u32>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut starts = Vec::new();
        let mut at = 0;
        for line in COMMON.split('\n') {
            if !line.is_empty() {
                starts.push(at as u32);
            }
            at += line.len() + 1;
        }
        starts.sort_unstable_by_key(|&s| line_at(s));
        starts.shrink_to_fit();
        starts
    })
}

/// The line of `COMMON` that starts at `start`.
fn line_at(start: u32) -> &'static str {
    let rest = &COMMON[start as usize..];
    rest.split('\n').next().unwrap_or(rest)
}

fn listed(password: &str) -> bool {
    common()
        .binary_search_by(|&s| line_at(s).cmp(password))
        .is_ok()
}

/// Indexes the list now (at start), so that no request pays for it.
pub fn warm() {
    common();
}

/// Whether a password is on the list, as typed or lower-cased (the list is lower case, so
/// `Password123` is as common as `password123`).
pub fn is_common(password: &str) -> bool {
    listed(password) || listed(&password.to_lowercase())
}

/// 400 `invalid_input` on `field` when the password is one of the common ones.
pub fn refuse_common(password: &Password, field: &str) -> ApiResult<()> {
    if !is_common(password.as_str()) {
        return Ok(());
    }
    Err(refusal(
        field,
        "not a common password",
        "is one of the most common passwords, the first an attacker tries; choose another \
         (a few unrelated words make a good one)",
    ))
}

/// 400 `invalid_input` on `field` when the password is, ignoring case, the account's email
/// address, the part of it before the `@`, or its name (as written, or without its spaces).
/// Chosen: equality only; a password that merely contains the name is left to the list and
/// the length rule.
pub fn refuse_personal(password: &Password, field: &str, email: &str, name: &str) -> ApiResult<()> {
    let typed = password.as_str().to_lowercase();
    let email = email.trim().to_lowercase();
    let local = email.rsplit_once('@').map_or(email.as_str(), |(l, _)| l);
    let name = name.trim().to_lowercase();
    let name_joined: String = name.chars().filter(|c| !c.is_whitespace()).collect();
    let personal = [email.as_str(), local, name.as_str(), name_joined.as_str()];
    if !personal.iter().any(|p| !p.is_empty() && *p == typed) {
        return Ok(());
    }
    Err(refusal(
        field,
        "not the account's email address or name",
        "is the account's email address or name, the first thing an attacker tries; choose \
         another",
    ))
}

/// Both rules, for a request that knows the account (sign-up, change).
pub fn refuse_weak(password: &Password, field: &str, email: &str, name: &str) -> ApiResult<()> {
    refuse_common(password, field)?;
    refuse_personal(password, field, email, name)
}

fn refusal(field: &str, rule: &str, why: &str) -> ApiError {
    ApiError::new(Code::InvalidInput)
        .message(format!("{field}: {why}."))
        .with_details(json!({ "field": field, "rule": rule }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pw(s: &str) -> Password {
        Password::parse(s, "password").unwrap()
    }

    #[test]
    fn the_list_is_the_published_one() {
        let lines: Vec<&str> = COMMON.lines().collect();
        assert_eq!(lines.len(), 19_640, "SOURCE.md names the count");
        assert_eq!(&lines[..4], ["123456", "123456789", "qwerty", "password"]);
        assert!(lines.iter().all(|l| *l == l.to_lowercase()));
        assert_eq!(common().len(), lines.len());
        let sorted: Vec<&str> = common().iter().map(|&s| line_at(s)).collect();
        assert!(sorted.windows(2).all(|w| w[0] < w[1]), "no duplicates");
        assert!(lines.iter().all(|l| listed(l)), "every line is found");
    }

    #[test]
    fn the_passwords_of_the_issue_are_refused_in_any_case() {
        for p in [
            "1234567890",
            "qwertyuiop",
            "1111111111",
            "1q2w3e4r5t",
            "password123",
            "Password123",
            "QWERTYUIOP",
        ] {
            let e = refuse_common(&pw(p), "password").unwrap_err();
            assert_eq!(e.code, Code::InvalidInput);
            assert_eq!(e.body()["error"]["details"]["field"], "password");
            assert!(e.more.message.contains("most common"), "{}", e.more.message);
            assert!(!e.more.message.contains(p), "the password is not echoed");
        }
        for p in ["correct horse battery", "pppppppppp", "password123 "] {
            assert!(refuse_common(&pw(p), "password").is_ok(), "{p}");
        }
    }

    #[test]
    fn the_account_s_email_local_part_and_name_are_refused() {
        let email = "ada.lovelace@example.com";
        let name = "Ada King Lovelace";
        for p in [
            "ada.lovelace@example.com",
            "ADA.LOVELACE@EXAMPLE.COM",
            "ada.lovelace",
            "ada king lovelace",
            "AdaKingLovelace",
        ] {
            let e = refuse_personal(&pw(p), "password", email, name).unwrap_err();
            assert_eq!(
                e.body()["error"]["details"]["rule"],
                "not the account's email address or name"
            );
        }
        for p in ["ada.lovelace1815", "lovelace@example.com", "example.com!"] {
            assert!(
                refuse_personal(&pw(p), "password", email, name).is_ok(),
                "{p}"
            );
        }
    }
}
