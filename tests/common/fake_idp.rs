//! A fake Google and a fake GitHub on loopback, speaking the shapes of the real ones: token
//! endpoint (form body; checks client id and secret, code, redirect URI and the PKCE verifier
//! against the challenge of the authorization), Google's `id_token` and userinfo, GitHub's
//! form-encoded token answer (JSON only when asked), `/user` and `/user/emails`, and a mode in
//! which the token endpoint hangs.
//!
//! There is no authorization page: a test reads the parameters of consoled's redirect and calls
//! `authorize`, which records them and issues a code, as the provider would after the user said yes.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub const CLIENT_ID: &str = "fake-client-id";
pub const CLIENT_SECRET: &str = "fake-client-secret";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Google,
    Github,
}

/// The person who signs in at the fake provider.
#[derive(Debug, Clone)]
pub struct Profile {
    /// Google `sub`; GitHub numeric id (as text).
    pub subject: String,
    pub email: String,
    pub email_verified: bool,
    pub name: String,
}

impl Profile {
    pub fn new(email: &str) -> Profile {
        Profile {
            subject: (1_000_000 + u32::from_le_bytes(consoled::crypto::random_bytes::<4>()) as u64)
                .to_string(),
            email: email.to_string(),
            email_verified: true,
            name: "Grace Hopper".into(),
        }
    }

    pub fn unverified(mut self) -> Profile {
        self.email_verified = false;
        self
    }
}

/// The query parameters of consoled's redirect to the provider.
#[derive(Debug, Clone)]
pub struct AuthRequest {
    pub url: String,
    pub params: HashMap<String, String>,
}

impl AuthRequest {
    pub fn parse(location: &str) -> AuthRequest {
        let (url, query) = location.split_once('?').expect("a query string");
        let params = consoled::http::form_decode(query).into_iter().collect();
        AuthRequest {
            url: url.to_string(),
            params,
        }
    }

    pub fn get(&self, name: &str) -> &str {
        self.params
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.params))
    }
}

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
}

struct Grant {
    challenge: String,
    redirect_uri: String,
    nonce: Option<String>,
    profile: Profile,
}

#[derive(Default)]
struct Inner {
    grants: HashMap<String, Grant>,
    tokens: HashMap<String, Profile>,
    seen: Vec<Seen>,
    hang: bool,
    /// Google: claims merged into the id_token (`null` removes a claim).
    claim_overrides: serde_json::Map<String, Value>,
    /// GitHub: answer the token request form-encoded even when JSON is asked for (as older
    /// GitHub Enterprise servers do).
    always_form: bool,
    /// GitHub: the primary address is listed as unverified.
    primary_unverified: bool,
}

pub struct FakeIdp {
    pub kind: Kind,
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    stop: Arc<AtomicBool>,
}

impl FakeIdp {
    pub fn google() -> FakeIdp {
        FakeIdp::start(Kind::Google)
    }

    pub fn github() -> FakeIdp {
        FakeIdp::start(Kind::Github)
    }

    fn start(kind: Kind) -> FakeIdp {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let inner = Arc::new(Mutex::new(Inner::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (i, s) = (inner.clone(), stop.clone());
        std::thread::spawn(move || accept_loop(kind, listener, i, s));
        FakeIdp {
            kind,
            addr,
            inner,
            stop,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The consoled variables that point the provider at this fake.
    pub fn env(&self) -> Vec<(String, String)> {
        let (name, api_var, api_path) = match self.kind {
            Kind::Google => ("GOOGLE", "USERINFO", "/v1/userinfo"),
            Kind::Github => ("GITHUB", "API", "/api/v3"),
        };
        vec![
            (format!("CONSOLED_{name}_CLIENT_ID"), CLIENT_ID.into()),
            (
                format!("CONSOLED_{name}_CLIENT_SECRET"),
                CLIENT_SECRET.into(),
            ),
            (format!("CONSOLED_{name}_AUTH_URL"), self.url("/authorize")),
            (format!("CONSOLED_{name}_TOKEN_URL"), self.url("/token")),
            (format!("CONSOLED_{name}_{api_var}_URL"), self.url(api_path)),
        ]
    }

    /// What the user's "yes" at the provider does: records the authorization request and
    /// returns the code that the provider would send back to the callback.
    pub fn authorize(&self, request: &AuthRequest, profile: &Profile) -> String {
        self.authorize_with_challenge(request, profile, request.get("code_challenge"))
    }

    /// As `authorize`, but remembering another PKCE challenge (to prove the check bites).
    pub fn authorize_with_challenge(
        &self,
        request: &AuthRequest,
        profile: &Profile,
        challenge: &str,
    ) -> String {
        assert_eq!(request.get("client_id"), CLIENT_ID);
        assert_eq!(request.get("code_challenge_method"), "S256");
        let code = format!("code-{}", super::unique());
        let grant = Grant {
            challenge: challenge.to_string(),
            redirect_uri: request.get("redirect_uri").to_string(),
            nonce: request.params.get("nonce").cloned(),
            profile: profile.clone(),
        };
        self.inner
            .lock()
            .unwrap()
            .grants
            .insert(code.clone(), grant);
        code
    }

    pub fn set_hang(&self, hang: bool) {
        self.inner.lock().unwrap().hang = hang;
    }

    pub fn set_claim(&self, name: &str, value: Value) {
        let mut inner = self.inner.lock().unwrap();
        inner.claim_overrides.insert(name.to_string(), value);
    }

    pub fn reset_claims(&self) {
        self.inner.lock().unwrap().claim_overrides.clear();
    }

    pub fn set_always_form(&self, on: bool) {
        self.inner.lock().unwrap().always_form = on;
    }

    pub fn set_primary_unverified(&self, on: bool) {
        self.inner.lock().unwrap().primary_unverified = on;
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().seen.clone()
    }
}

impl Drop for FakeIdp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn accept_loop(kind: Kind, listener: TcpListener, inner: Arc<Mutex<Inner>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let (i, s) = (inner.clone(), stop.clone());
                std::thread::spawn(move || {
                    let _ = serve(kind, stream, &i, &s);
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn serve(
    kind: Kind,
    stream: TcpStream,
    inner: &Mutex<Inner>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let seen = read_request(&mut reader)?;
    inner.lock().unwrap().seen.push(seen.clone());
    if inner.lock().unwrap().hang {
        // Hold the connection without answering until the test ends.
        let until = Instant::now() + Duration::from_secs(60);
        while !stop.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        return Ok(());
    }
    let (status, content_type, body) = route(kind, &seen, &mut inner.lock().unwrap());
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

fn read_request(reader: &mut impl BufRead) -> std::io::Result<Seen> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut l = String::new();
        reader.read_line(&mut l)?;
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.insert(n.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    Ok(Seen {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

type Answer = (u16, &'static str, String);

fn route(kind: Kind, req: &Seen, inner: &mut Inner) -> Answer {
    let path = req.path.split('?').next().unwrap_or("");
    match (kind, req.method.as_str(), path) {
        (_, "POST", "/token") => token(kind, req, inner),
        (Kind::Google, "GET", "/v1/userinfo") => with_profile(
            req,
            inner,
            |p, _| json!({"sub": p.subject, "email": p.email, "email_verified": p.email_verified}),
        ),
        (Kind::Github, "GET", "/api/v3/user") => with_profile(
            req,
            inner,
            |p, _| json!({"id": p.subject.parse::<u64>().unwrap(), "login": "ghuser", "name": p.name}),
        ),
        (Kind::Github, "GET", "/api/v3/user/emails") => with_profile(req, inner, |p, i| {
            json!([
                {"email": "secondary@example.net", "primary": false, "verified": true, "visibility": null},
                {"email": p.email, "primary": true, "verified": !i.primary_unverified, "visibility": "private"},
            ])
        }),
        _ => json_answer(404, json!({"message": "Not Found"})),
    }
}

fn json_answer(status: u16, value: Value) -> Answer {
    (status, "application/json", value.to_string())
}

/// An API call: the bearer token must be one the token endpoint issued.
fn with_profile(req: &Seen, inner: &Inner, answer: impl Fn(&Profile, &Inner) -> Value) -> Answer {
    let token = req
        .headers
        .get("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    match inner.tokens.get(token) {
        Some(profile) => json_answer(200, answer(profile, inner)),
        None => json_answer(401, json!({"message": "Bad credentials"})),
    }
}

fn token(kind: Kind, req: &Seen, inner: &mut Inner) -> Answer {
    let form: HashMap<String, String> =
        consoled::http::form_decode(&req.body).into_iter().collect();
    let field = |n: &str| form.get(n).map(String::as_str).unwrap_or("");
    let wants_json = req
        .headers
        .get("accept")
        .is_some_and(|a| a.contains("application/json"));
    let error = |code: &str| token_error(kind, code, wants_json && !inner.always_form);
    if field("client_id") != CLIENT_ID || field("client_secret") != CLIENT_SECRET {
        return error("invalid_client");
    }
    if field("grant_type") != "authorization_code" {
        return error("unsupported_grant_type");
    }
    // A code is single-use, whatever happens next.
    let Some(grant) = inner.grants.remove(field("code")) else {
        return error("invalid_grant");
    };
    if field("redirect_uri") != grant.redirect_uri {
        return error("redirect_uri_mismatch");
    }
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(field("code_verifier").as_bytes()));
    if challenge != grant.challenge {
        return error("invalid_grant");
    }
    let access_token = format!("at-{}", super::unique());
    inner
        .tokens
        .insert(access_token.clone(), grant.profile.clone());
    match kind {
        Kind::Google => {
            let id_token = id_token(&grant, &inner.claim_overrides);
            json_answer(
                200,
                json!({"access_token": access_token, "expires_in": 3599, "token_type": "Bearer",
                       "scope": "openid email profile", "id_token": id_token}),
            )
        }
        Kind::Github if wants_json && !inner.always_form => json_answer(
            200,
            json!({"access_token": access_token, "token_type": "bearer", "scope": "read:user,user:email"}),
        ),
        Kind::Github => (
            200,
            "application/x-www-form-urlencoded; charset=utf-8",
            format!(
                "access_token={access_token}&scope=read%3Auser%2Cuser%3Aemail&token_type=bearer"
            ),
        ),
    }
}

/// Google answers errors with 400 JSON; GitHub with 200 and an `error` field.
fn token_error(kind: Kind, code: &str, json: bool) -> Answer {
    match (kind, json) {
        (Kind::Google, _) => json_answer(400, json!({"error": code})),
        (Kind::Github, true) => json_answer(200, json!({"error": code, "error_description": "x"})),
        (Kind::Github, false) => (
            200,
            "application/x-www-form-urlencoded",
            format!("error={code}&error_description=The+code+passed+is+incorrect"),
        ),
    }
}

fn id_token(grant: &Grant, overrides: &serde_json::Map<String, Value>) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let p = &grant.profile;
    let mut claims = json!({
        "iss": "https://accounts.google.com",
        "azp": CLIENT_ID,
        "aud": CLIENT_ID,
        "sub": p.subject,
        "email": p.email,
        "email_verified": p.email_verified,
        "name": p.name,
        "iat": now,
        "exp": now + 3600,
        "nonce": grant.nonce,
    });
    let map = claims.as_object_mut().unwrap();
    for (k, v) in overrides {
        if v.is_null() {
            map.remove(k);
        } else {
            map.insert(k.clone(), v.clone());
        }
    }
    let enc = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let header = json!({"alg": "RS256", "kid": "fake", "typ": "JWT"});
    format!(
        "{}.{}.{}",
        enc(&header),
        enc(&claims),
        URL_SAFE_NO_PAD.encode("not-a-signature")
    )
}
