//! JSON request bodies: typed field access with `invalid_input` errors naming the field and rule,
//! and the validated value types (`Email`, `Password`, `Name`) normalised in exactly one place.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// The fields of a JSON object body.
pub struct Fields(Map<String, Value>);

impl Fields {
    /// Parses a body that must be a JSON object. An empty body is an empty object, so that
    /// required fields are reported by name.
    pub fn parse(body: &[u8]) -> Result<Fields, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Fields(Map::new()));
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => Ok(Fields(map)),
            Ok(_) => Err(ApiError::invalid("body", "must be a JSON object")),
            Err(e) => Err(ApiError::invalid("body", "malformed JSON").with_details(
                serde_json::json!({
                    "field": "body", "rule": "malformed JSON",
                    "line": e.line(), "column": e.column()
                }),
            )),
        }
    }

    /// An optional string field (absent or null is `None`).
    pub fn optional_string(&self, name: &str) -> Result<Option<&str>, ApiError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::invalid(name, "must be a string")),
        }
    }

    /// An optional whole number within `range` (absent or null is `None`). `5.0` is one too, as
    /// JSON Schema's `integer` says (a client's JSON library may write a whole number so).
    pub fn optional_integer(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<Option<u64>, ApiError> {
        let rule = || format!("a whole number from {} to {}", range.start(), range.end());
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64().or_else(|| whole(n.as_f64()?)) {
                Some(v) if range.contains(&v) => Ok(Some(v)),
                _ => Err(ApiError::invalid(name, &rule())),
            },
            Some(_) => Err(ApiError::invalid(name, &rule())),
        }
    }

    /// A required string field.
    pub fn string(&self, name: &str) -> Result<&str, ApiError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Err(ApiError::invalid(name, "required")),
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(ApiError::invalid(name, "must be a string")),
        }
    }
}

/// A trimmed, lower-cased email address of valid form and at most 254 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Email(String);

impl Email {
    pub fn parse(raw: &str) -> Result<Email, ApiError> {
        let email = raw.trim().to_lowercase();
        if email.chars().count() > 254 {
            return Err(ApiError::invalid("email", "at most 254 characters"));
        }
        if !email_form_ok(&email) {
            return Err(ApiError::invalid("email", "must be an email address"));
        }
        Ok(Email(email))
    }

    /// For addresses from trusted sources (identity providers): normalised, not length-checked.
    pub fn normalise(raw: &str) -> Email {
        Email(raw.trim().to_lowercase())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn email_form_ok(email: &str) -> bool {
    let Some((local, domain)) = email.rsplit_once('@') else {
        return false;
    };
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..")
        && local
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~.".contains(&b));
    let labels: Vec<&str> = domain.split('.').collect();
    let domain_ok = labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    local_ok && domain_ok
}

/// A new password in its normalised form (`hashing::normalise`: NFC, the form that is hashed):
/// 10 to 128 characters (Unicode scalar values) in that form, so that the rules judge one
/// password alike however it was typed.
pub struct Password(String);

impl Password {
    pub fn parse(raw: &str, field: &str) -> Result<Password, ApiError> {
        let raw = crate::hashing::normalise(raw);
        let n = raw.chars().count();
        if n < 10 {
            return Err(ApiError::invalid(field, "at least 10 characters"));
        }
        if n > 128 {
            return Err(ApiError::invalid(field, "at most 128 characters"));
        }
        Ok(Password(raw.into_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `f` when it is a whole number a `u64` holds.
fn whole(f: f64) -> Option<u64> {
    (f.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(&f)).then_some(f as u64)
}

/// A display name: 1 to 100 characters after trimming, no control characters, and what
/// `names` asks (no bidirectional overrides or isolates, not only invisible characters).
pub fn parse_name(raw: &str) -> Result<String, ApiError> {
    let name = raw.trim();
    let n = name.chars().count();
    if n == 0 {
        return Err(ApiError::invalid("name", "at least 1 character"));
    }
    if n > 100 {
        return Err(ApiError::invalid("name", "at most 100 characters"));
    }
    if name.chars().any(char::is_control) {
        return Err(ApiError::invalid("name", "no control characters"));
    }
    if let Some(rule) = super::names::refusal(name) {
        return Err(ApiError::invalid("name", rule));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn fields_report_missing_and_mistyped() {
        let f = Fields::parse(br#"{"a": "x", "b": 1, "c": null}"#).unwrap();
        assert_eq!(f.string("a").unwrap(), "x");
        assert_eq!(
            f.string("b").unwrap_err().more.message,
            "b: must be a string"
        );
        assert_eq!(f.string("c").unwrap_err().more.message, "c: required");
        assert_eq!(f.string("d").unwrap_err().more.message, "d: required");
        for bad in [&b"[1]"[..], b"\"s\"", b"{", b"\xff\xfe", b"{\"a\":}"] {
            assert_eq!(Fields::parse(bad).err().unwrap().code, Code::InvalidInput);
        }
        assert!(Fields::parse(b"  ").is_ok());
        let f = Fields::parse(
            br#"{"n": 5, "whole": 5.0, "big": 1e3, "neg": -1, "half": 5.5, "s": "5"}"#,
        )
        .unwrap();
        assert_eq!(f.optional_integer("n", 1..=10).unwrap(), Some(5));
        // A whole number is one whichever way JSON writes it (JSON Schema's `integer`).
        assert_eq!(f.optional_integer("whole", 1..=10).unwrap(), Some(5));
        assert_eq!(f.optional_integer("none", 1..=10).unwrap(), None);
        for bad in ["big", "neg", "half", "s"] {
            let e = f.optional_integer(bad, 1..=10).unwrap_err();
            assert_eq!(
                e.more.message,
                format!("{bad}: a whole number from 1 to 10")
            );
        }
    }

    #[test]
    fn emails_are_normalised_once() {
        assert_eq!(
            Email::parse("  Ann@Example.COM ").unwrap().as_str(),
            "ann@example.com"
        );
        for bad in [
            "",
            "a",
            "a@",
            "@b.c",
            "a@b",
            "a b@c.d",
            "a@b..c",
            "a@-b.c",
            ".a@b.c",
            "a@b.c\u{0}",
        ] {
            assert!(Email::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn email_length_limit_is_254() {
        let domain = format!(
            "{}.{}.{}.com",
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        let make = |total: usize| format!("{}@{}", "a".repeat(total - 1 - domain.len()), domain);
        assert!(Email::parse(&make(254)).is_ok());
        assert!(Email::parse(&make(255)).is_err());
    }

    #[test]
    fn password_and_name_limits() {
        assert!(Password::parse(&"p".repeat(9), "password").is_err());
        assert!(Password::parse(&"p".repeat(10), "password").is_ok());
        assert!(Password::parse(&"é".repeat(128), "password").is_ok());
        assert!(Password::parse(&"p".repeat(129), "password").is_err());
        assert!(parse_name("").is_err());
        assert!(parse_name("   ").is_err());
        assert_eq!(parse_name(" x ").unwrap(), "x");
        assert!(parse_name(&"n".repeat(100)).is_ok());
        assert!(parse_name(&"n".repeat(101)).is_err());
        assert!(parse_name("a\u{0}b").is_err());
        assert!(parse_name("a\u{202e}b").is_err());
        assert!(parse_name(" \u{200b} ").is_err());
        // Length and the rules judge the normalised form: 10 decomposed letters are 5.
        assert!(Password::parse(&"e\u{301}".repeat(5), "password").is_err());
        assert_eq!(
            Password::parse(&"e\u{301}".repeat(10), "password")
                .unwrap()
                .as_str(),
            "\u{e9}".repeat(10)
        );
    }
}
