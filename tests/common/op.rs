//! A real OpenID Provider for tests: `tests/oidc/provider.mjs` (panva's oidc-provider, installed
//! pinned by scripts/oidc-deps.sh) in a Node.js process on loopback, one port per issuer, driven
//! through its stdin (accounts, key rotation, misbehaviours; see that file). And `Browser`: what a
//! browser does in the redirect flow (follows redirects, keeps cookies per host, submits the
//! provider's login and consent forms), with consoled at the made-up origin
//! `http://consoled.test` (the redirect URI registered at the provider) and the console at
//! `http://console.test`, where it stops. No name is ever resolved: `consoled.test` is the test
//! server's loopback address.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use super::{Client, Response};

pub const CONSOLED: &str = "http://consoled.test";
pub const CONSOLE: &str = "http://console.test";

/// The Node.js process of the providers.
pub struct OpenIdProvider {
    child: Child,
    io: Mutex<(ChildStdin, Receiver<String>)>,
    /// Issuer URL of each issuer name.
    pub issuers: HashMap<String, String>,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oidc")
}

/// Why the provider cannot run here, if it cannot.
fn missing() -> Option<String> {
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Some("node is not installed (scripts/oidc-deps.sh installs it as root)".into());
    }
    if !dir().join("node_modules/oidc-provider").is_dir() {
        return Some("tests/oidc/node_modules is missing: run scripts/oidc-deps.sh".into());
    }
    None
}

impl OpenIdProvider {
    /// Starts the issuers of `spec` (see provider.mjs); `None`, with a line saying the test is
    /// skipped, when Node.js or the package is missing (a failure under CI=true, where `make
    /// test` has installed them).
    pub fn start(test: &str, spec: &Value) -> Option<OpenIdProvider> {
        if let Some(why) = missing() {
            assert!(
                std::env::var("CI").is_err(),
                "{test}: the OpenID Provider cannot run: {why}"
            );
            eprintln!("SKIPPED {test}: {why}");
            return None;
        }
        // The provider's own notices and errors, for a failing test's reader (one file, each run
        // anew, under target/).
        let log = std::fs::File::create(
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("oidc-provider.log"),
        )
        .unwrap();
        let mut child = Command::new("node")
            .arg(dir().join("provider.mjs"))
            .arg(spec.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start node");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let ready = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the provider says ready");
        let issuers = serde_json::from_str(ready.strip_prefix("ready ").expect("ready line"))
            .expect("issuer URLs");
        let stdin = child.stdin.take().unwrap();
        Some(OpenIdProvider {
            child,
            io: Mutex::new((stdin, rx)),
            issuers,
        })
    }

    pub fn issuer(&self, name: &str) -> &str {
        &self.issuers[name]
    }

    /// Sends a command; its answer (`ok <JSON>`), parsed.
    pub fn command(&self, command: &Value) -> Value {
        // A test that failed holding it leaves nothing half-done: every exchange is one line each.
        let mut io = self.io.lock().unwrap_or_else(|e| e.into_inner());
        writeln!(io.0, "{command}").unwrap();
        io.0.flush().unwrap();
        let answer = io.1.recv_timeout(Duration::from_secs(30)).unwrap();
        let body = answer
            .strip_prefix("ok ")
            .unwrap_or_else(|| panic!("{command}: {answer}"));
        serde_json::from_str(body).unwrap()
    }

    /// What `findAccount` answers for a login name.
    pub fn account(&self, login: &str, claims: Value) {
        self.command(&json!({"cmd": "account", "id": login, "claims": claims}));
    }

    /// Requests an issuer has answered on a path (`/token`, `/jwks`, ...).
    pub fn seen(&self, issuer: &str, path: &str) -> u64 {
        self.command(&json!({"cmd": "stats"}))[issuer][path]
            .as_u64()
            .unwrap_or(0)
    }
}

impl Drop for OpenIdProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a run of the browser stopped.
#[derive(Debug)]
pub enum Stop {
    /// A page to act on (the provider's login or consent form).
    Page { url: String, html: String },
    /// The console: consoled's final redirect (signed in, or `/login?error=...`).
    Console(String),
    /// About to open consoled's callback (only when asked to stop there).
    Callback(String),
}

/// One person's browser: a cookie jar per host (ports share cookies, as in browsers).
pub struct Browser {
    pub consoled: Client,
    provider_cookies: HashMap<String, String>,
}

impl Browser {
    pub fn new(consoled: SocketAddr) -> Browser {
        Browser {
            consoled: Client::new(consoled),
            provider_cookies: HashMap::new(),
        }
    }

    /// One request, no redirect followed.
    pub fn request(&mut self, method: &str, url: &str, form: &[(&str, &str)]) -> Response {
        let (origin, path) = split(url);
        let body = form_body(form);
        let headers: &[(&str, &str)] = if method == "POST" {
            &[("Content-Type", "application/x-www-form-urlencoded")]
        } else {
            &[]
        };
        if origin == CONSOLED {
            return self.consoled.send(method, &path, headers, body.as_bytes());
        }
        let addr: SocketAddr = origin
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .filter(|a: &SocketAddr| a.ip().is_loopback())
            .unwrap_or_else(|| panic!("the browser goes only to loopback: {url}"));
        let mut client = Client::new(addr);
        client.cookies = std::mem::take(&mut self.provider_cookies);
        let response = client.send(method, &path, headers, body.as_bytes());
        self.provider_cookies = client.cookies;
        response
    }

    /// Follows redirects from `url` until a page, the console, or (with `stop_at_callback`)
    /// consoled's callback.
    pub fn run(&mut self, url: &str, stop_at_callback: bool) -> Stop {
        self.follow("GET", url, &[], stop_at_callback)
    }

    fn follow(
        &mut self,
        method: &str,
        url: &str,
        form: &[(&str, &str)],
        stop_at_callback: bool,
    ) -> Stop {
        let mut method = method.to_string();
        let mut url = url.to_string();
        let mut form = form.to_vec();
        for _ in 0..20 {
            if url.starts_with(CONSOLE) {
                return Stop::Console(url);
            }
            if stop_at_callback && url.starts_with(CONSOLED) && url.contains("/callback") {
                return Stop::Callback(url);
            }
            let r = self.request(&method, &url, &form);
            match r.status {
                301..=303 | 307 | 308 => {
                    let location = r.header("location").expect("Location");
                    url = absolute(&url, location);
                    method = "GET".into();
                    form.clear();
                }
                200 => {
                    let html = String::from_utf8_lossy(&r.body).into_owned();
                    return Stop::Page { url, html };
                }
                status => panic!(
                    "{method} {url}: {status} {}",
                    String::from_utf8_lossy(&r.body)
                ),
            }
        }
        panic!("too many redirects from {url}");
    }

    /// Submits the page's (first) form with `fields` added to its hidden ones.
    pub fn submit(&mut self, page: &Stop, fields: &[(&str, &str)], stop_at_callback: bool) -> Stop {
        let Stop::Page { url, html } = page else {
            panic!("not a page: {page:?}");
        };
        let action = attribute(&html[html.find("<form").expect("a form")..], "action");
        let mut all: Vec<(String, String)> = hidden_inputs(html);
        all.extend(fields.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let refs: Vec<(&str, &str)> = all.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.follow("POST", &absolute(url, &action), &refs, stop_at_callback)
    }

    /// The whole sign-in at `provider` as `login`: start, the provider's login page, its consent
    /// page (when it asks), back to consoled and on to the console.
    pub fn sign_in(&mut self, provider: &str, login: &str) -> Stop {
        let start = format!("{CONSOLED}/auth/oauth/{provider}/start");
        let page = self.run(&start, false);
        self.log_in_and_consent(page, login, false)
    }

    /// From the provider's login page: logs in and consents.
    pub fn log_in_and_consent(&mut self, page: Stop, login: &str, stop_at_callback: bool) -> Stop {
        let mut stop = self.submit(
            &page,
            &[("login", login), ("password", "any")],
            stop_at_callback,
        );
        if let Stop::Page { html, .. } = &stop {
            if html.contains(r#"value="consent""#) {
                stop = self.submit(&stop, &[], stop_at_callback);
            }
        }
        stop
    }
}

/// `(origin, path and query)` of an absolute http URL.
fn split(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let slash = rest.find('/').unwrap_or(rest.len());
    let path = if slash == rest.len() {
        "/"
    } else {
        &rest[slash..]
    };
    (format!("http://{}", &rest[..slash]), path.to_string())
}

pub fn absolute(base: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_string();
    }
    format!("{}{location}", split(base).0)
}

fn form_body(form: &[(&str, &str)]) -> String {
    form.iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                consoled::http::percent_encode(k),
                consoled::http::percent_encode(v)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn attribute(tag: &str, name: &str) -> String {
    let start = tag.find(&format!("{name}=\"")).expect(name) + name.len() + 2;
    let end = start + tag[start..].find('"').unwrap();
    tag[start..end].replace("&amp;", "&")
}

fn hidden_inputs(html: &str) -> Vec<(String, String)> {
    html.split("<input")
        .skip(1)
        .filter(|tag| tag.contains(r#"type="hidden""#))
        .map(|tag| (attribute(tag, "name"), attribute(tag, "value")))
        .collect()
}

/// A query parameter of a URL, decoded.
pub fn query_param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    consoled::http::form_decode(query)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// `url` with one query parameter replaced.
pub fn with_param(url: &str, name: &str, value: &str) -> String {
    let (base, query) = url.split_once('?').expect("a query");
    let params: Vec<String> = consoled::http::form_decode(query)
        .into_iter()
        .map(|(k, v)| {
            let v = if k == name { value.to_string() } else { v };
            format!(
                "{}={}",
                consoled::http::percent_encode(&k),
                consoled::http::percent_encode(&v)
            )
        })
        .collect();
    format!("{base}?{}", params.join("&"))
}
