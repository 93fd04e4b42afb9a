//! GitHub (OAuth app): the identity is the numeric user id of `GET {api}/user`; the address is
//! the primary one of `GET {api}/user/emails`, and only if GitHub has verified it.

use serde_json::Value;

use super::client::Exchange;
use super::{Declined, Identity};
use crate::http::json::Email;

const ACCEPT: &str = "application/vnd.github+json";

pub fn identity(exchange: &Exchange) -> Result<Identity, Declined> {
    let tokens = exchange.tokens()?;
    let access_token = tokens["access_token"].as_str().unwrap_or_default();
    let api = &exchange.config.api_url;
    let user = exchange.get(&format!("{api}/user"), access_token, ACCEPT)?;
    let id = user["id"]
        .as_u64()
        .ok_or_else(|| Declined::failed("github: /user without a numeric id"))?;
    let emails = exchange.get(&format!("{api}/user/emails"), access_token, ACCEPT)?;
    let email = primary_verified(&emails)
        .ok_or_else(|| Declined::unverified("github: no verified primary email"))?;
    let email = Email::parse(email)
        .map_err(|_| Declined::failed("github: the primary address is not an email address"))?;
    let name = [&user["name"], &user["login"]]
        .into_iter()
        .filter_map(Value::as_str)
        .find(|n| !n.trim().is_empty())
        .unwrap_or_default()
        .to_string();
    Ok(Identity {
        subject: id.to_string(),
        email: Some(email),
        email_verified: true,
        name,
    })
}

/// The address marked both primary and verified.
fn primary_verified(emails: &Value) -> Option<&str> {
    emails.as_array()?.iter().find_map(|e| {
        let ok = e["primary"].as_bool() == Some(true) && e["verified"].as_bool() == Some(true);
        ok.then(|| e["email"].as_str()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_verified_primary_address_counts() {
        let emails = json!([
            {"email": "other@example.com", "primary": false, "verified": true},
            {"email": "main@example.com", "primary": true, "verified": true},
        ]);
        assert_eq!(primary_verified(&emails), Some("main@example.com"));
        let unverified = json!([
            {"email": "other@example.com", "primary": false, "verified": true},
            {"email": "main@example.com", "primary": true, "verified": false},
        ]);
        assert_eq!(primary_verified(&unverified), None);
        assert_eq!(
            primary_verified(&json!({"message": "Bad credentials"})),
            None
        );
    }
}
