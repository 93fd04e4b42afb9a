//! An ID token as a compact JWS (RFC 7515 7.1): header, claims and signature. The claims are
//! handed out only together with a key whose signature check passed (`Token::verified`).

use serde_json::Value;

use super::keys::{printable, Alg, Key};
use crate::crypto::b64url_decode;

/// ID tokens are a few kilobytes; a bigger one is not one.
const MAX_TOKEN: usize = 16 * 1024;

#[derive(Debug)]
pub struct Token {
    pub alg: Alg,
    pub kid: Option<String>,
    /// `BASE64URL(header) || '.' || BASE64URL(payload)`, what the signature covers.
    input: String,
    signature: Vec<u8>,
    claims: Value,
}

/// Splits and decodes a compact JWS; refuses what no valid ID token is: another shape, an
/// algorithm outside `Alg`, critical extensions we do not implement, claims that are not an
/// object.
pub fn parse(token: &str) -> Result<Token, String> {
    if token.len() > MAX_TOKEN {
        return Err(format!("id_token of {} bytes", token.len()));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("id_token is not a compact JWS (three parts)".into());
    };
    let header = object(header, "header")?;
    let alg = Alg::parse(header["alg"].as_str().unwrap_or("none"))?;
    if header.get("crit").is_some() {
        // RFC 7515 4.1.11: a recipient that does not understand them must refuse.
        return Err("id_token header has critical extensions (crit)".into());
    }
    let kid = match &header["kid"] {
        Value::Null => None,
        Value::String(kid) => Some(kid.clone()),
        _ => return Err("id_token header kid is not a string".into()),
    };
    let signature = b64url_decode(signature)
        .filter(|s| !s.is_empty())
        .ok_or("id_token has no signature")?;
    Ok(Token {
        alg,
        kid,
        input: token[..header_and_payload_len(token)].to_string(),
        signature,
        claims: object(payload, "claims")?,
    })
}

impl Token {
    /// The claims, if `key` made the signature.
    pub fn verified(self, key: &Key) -> Option<Value> {
        key.verify(self.alg, self.input.as_bytes(), &self.signature)
            .then_some(self.claims)
    }

    /// The `kid` for a log line.
    pub fn kid_shown(&self) -> String {
        self.kid
            .as_deref()
            .map_or_else(|| "(none)".into(), printable)
    }
}

fn header_and_payload_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(0)
}

fn object(part: &str, what: &str) -> Result<Value, String> {
    let bytes = b64url_decode(part).ok_or_else(|| format!("id_token {what} is not base64url"))?;
    match serde_json::from_slice(&bytes) {
        Ok(value @ Value::Object(_)) => Ok(value),
        _ => Err(format!("id_token {what} is not a JSON object")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::keys::tests::es256_key;
    use super::*;
    use crate::crypto::b64url;
    use serde_json::json;

    fn compact(header: &Value, claims: &Value, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
        let input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let signature = sign(input.as_bytes());
        format!("{input}.{}", b64url(&signature))
    }

    #[test]
    fn a_signed_token_gives_its_claims_to_its_key_only() {
        let (jwk, sign) = es256_key("k1");
        let (other_jwk, _) = es256_key("k1");
        let claims = json!({"sub": "1", "iss": "https://i.example"});
        let token = compact(&json!({"alg": "ES256", "kid": "k1"}), &claims, &sign);
        let key = Key::from_jwk(&jwk).unwrap();
        let parsed = parse(&token).unwrap();
        assert_eq!(
            (parsed.alg, parsed.kid.as_deref()),
            (Alg::Es256, Some("k1"))
        );
        assert_eq!(parsed.verified(&key), Some(claims.clone()));
        let other = Key::from_jwk(&other_jwk).unwrap();
        assert_eq!(
            parse(&token).unwrap().verified(&other),
            None,
            "same kid, other key"
        );

        // The claims changed after signing.
        let (head, rest) = token.split_once('.').unwrap();
        let sig = rest.split_once('.').unwrap().1;
        let changed = b64url(
            json!({"sub": "2", "iss": "https://i.example"})
                .to_string()
                .as_bytes(),
        );
        let tampered = format!("{head}.{changed}.{sig}");
        assert_eq!(parse(&tampered).unwrap().verified(&key), None);
    }

    #[test]
    fn what_is_no_id_token_is_refused() {
        let (_, sign) = es256_key("k");
        let claims = json!({"sub": "1"});
        let unsigned = format!(
            "{}.{}.",
            b64url(br#"{"alg":"none"}"#),
            b64url(claims.to_string().as_bytes())
        );
        assert!(parse(&unsigned).unwrap_err().contains("unsigned"));
        let hmac = compact(&json!({"alg": "HS256"}), &claims, |_| vec![1; 32]);
        assert!(parse(&hmac).unwrap_err().contains("shared secret"));
        let no_alg = compact(&json!({"kid": "k"}), &claims, &sign);
        assert!(parse(&no_alg).is_err());
        let crit = compact(&json!({"alg": "ES256", "crit": ["exp"]}), &claims, &sign);
        assert!(parse(&crit).unwrap_err().contains("crit"));
        let array = compact(&json!({"alg": "ES256"}), &json!([1]), &sign);
        assert!(parse(&array).unwrap_err().contains("claims"));
        let empty_sig = compact(&json!({"alg": "ES256"}), &claims, |_| Vec::new());
        assert!(parse(&empty_sig).unwrap_err().contains("no signature"));
        for bad in [
            "",
            "a.b",
            "a.b.c.d",
            "!!.e30.AA",
            &"a".repeat(MAX_TOKEN + 1),
        ] {
            assert!(parse(bad).is_err(), "{bad:.20}");
        }
        let numeric_kid = compact(&json!({"alg": "ES256", "kid": 7}), &claims, &sign);
        assert!(parse(&numeric_kid).is_err());
    }
}
