//! HTTP calls to identity providers through ureq: every call bounded in time (connect and the
//! whole exchange) and in size, no redirects followed, 4xx/5xx read as answers rather than
//! errors so that their `error` field can be logged.

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Map, Value};

use super::{printable, Declined};
use crate::config::oidc::TokenAuth;
use crate::config::ProviderConfig;
use crate::http::{form_decode, percent_encode};

/// Provider answers are small; anything bigger is not one.
const MAX_ANSWER: u64 = 256 * 1024;
const USER_AGENT: &str = concat!("consoled/", env!("CARGO_PKG_VERSION"));

/// One agent for the process: it keeps TLS configuration and idle connections between sign-ins.
/// Timeouts are set per request, from the configuration of the server that makes it.
fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(USER_AGENT)
            .build()
            .into()
    })
}

/// An answer: status and body parsed as JSON or, failing that, as a form.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub fields: Value,
}

/// The code exchange of one callback.
pub struct Exchange<'a> {
    pub config: &'a ProviderConfig,
    /// How the client authenticates at the token endpoint (Google and GitHub: in the form).
    pub auth: TokenAuth,
    pub code: &'a str,
    pub redirect_uri: String,
    pub verifier: &'a str,
    pub timeout: Duration,
}

impl Exchange<'_> {
    /// Trades the code for tokens (RFC 6749 4.1.3 with the PKCE verifier); the token answer.
    pub fn tokens(&self) -> Result<Map<String, Value>, Declined> {
        let config = self.config;
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", self.code),
            ("redirect_uri", &self.redirect_uri),
            ("code_verifier", self.verifier),
        ];
        let mut request = agent()
            .post(&config.token_url)
            // GitHub answers form-encoded unless asked for JSON; `Answer` reads both.
            .header("Accept", "application/json");
        match self.auth {
            TokenAuth::Post => {
                form.push(("client_id", &config.client_id));
                form.push(("client_secret", &config.client_secret));
            }
            TokenAuth::Basic => {
                request = request.header("Authorization", basic(config));
            }
        }
        let request = request
            .config()
            .timeout_global(Some(self.timeout))
            .timeout_connect(Some(self.timeout))
            .build();
        let answer = read(request.send_form(form), "token endpoint")?;
        let Value::Object(fields) = answer.fields else {
            return Err(Declined::failed("token endpoint: answer is not an object"));
        };
        let has_token = fields.get("access_token").and_then(Value::as_str).is_some();
        if answer.status != 200 || !has_token {
            let error = fields.get("error").and_then(Value::as_str).unwrap_or("");
            return Err(Declined::failed(format!(
                "token endpoint: status {} error {:?}",
                answer.status,
                printable(error)
            )));
        }
        Ok(fields)
    }

    /// GET with the access token; the answer must be 200 JSON.
    pub fn get(&self, url: &str, access_token: &str, accept: &str) -> Result<Value, Declined> {
        let request = agent()
            .get(url)
            .header("Authorization", format!("Bearer {access_token}"))
            .header("Accept", accept)
            .config()
            .timeout_global(Some(self.timeout))
            .timeout_connect(Some(self.timeout))
            .build();
        let what = url.rsplit('/').next().unwrap_or("api");
        let answer = read(request.call(), what)?;
        if answer.status != 200 {
            return Err(Declined::failed(format!(
                "{what}: status {}",
                answer.status
            )));
        }
        Ok(answer.fields)
    }
}

/// RFC 6749 2.3.1: `client_secret_basic`, each part form-encoded before base64.
fn basic(config: &ProviderConfig) -> String {
    use base64::Engine;
    let pair = format!(
        "{}:{}",
        percent_encode(&config.client_id),
        percent_encode(&config.client_secret)
    );
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// GET of a public JSON document (a discovery document, a key set): 200 and a JSON object, else
/// the reason, for the log.
pub fn fetch_json(url: &str, timeout: Duration) -> Result<Value, String> {
    let request = agent()
        .get(url)
        .header("Accept", "application/json")
        .config()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(timeout))
        .build();
    let answer = read(request.call(), url).map_err(|d| d.reason)?;
    match answer.fields {
        _ if answer.status != 200 => Err(format!("{url}: status {}", answer.status)),
        fields @ Value::Object(_) => Ok(fields),
        _ => Err(format!("{url}: the answer is not a JSON object")),
    }
}

fn read(
    result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    what: &str,
) -> Result<Answer, Declined> {
    let mut response = result.map_err(|e| Declined::failed(format!("{what}: {e}")))?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER)
        .read_to_string()
        .map_err(|e| Declined::failed(format!("{what}: reading the answer: {e}")))?;
    Ok(Answer {
        status,
        fields: parse_fields(&body),
    })
}

/// JSON when it is JSON, else `application/x-www-form-urlencoded` pairs as a JSON object of
/// strings (GitHub's default token answer).
pub fn parse_fields(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        return value;
    }
    let map: Map<String, Value> = form_decode(body.trim())
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_form_encoded_first() {
        let config = ProviderConfig {
            client_id: "my app".into(),
            client_secret: "s:e/c+r".into(),
            auth_url: String::new(),
            token_url: String::new(),
            api_url: String::new(),
        };
        // base64("my%20app:s%3Ae%2Fc%2Br")
        assert_eq!(basic(&config), "Basic bXklMjBhcHA6cyUzQWUlMkZjJTJCcg==");
    }

    #[test]
    fn reads_json_and_form_answers() {
        let json = parse_fields(r#"{"access_token":"a","token_type":"bearer"}"#);
        assert_eq!(json["access_token"], "a");
        let form = parse_fields("access_token=gho_x%2By&scope=read%3Auser&token_type=bearer");
        assert_eq!(form["access_token"], "gho_x+y");
        assert_eq!(form["scope"], "read:user");
        let error = parse_fields("error=bad_verification_code&error_description=The+code");
        assert_eq!(error["error"], "bad_verification_code");
        assert!(error.get("access_token").is_none());
    }
}
