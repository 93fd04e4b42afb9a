//! Test harness: a real server on an ephemeral port against the private PostgreSQL of
//! `make test` (DATABASE_URL), and a small raw HTTP/1.1 client with a cookie jar.
#![allow(dead_code)]

pub mod binary;
pub mod browsers;
pub mod checks;
pub mod fake_idp;
pub mod op;
pub mod patroni;
pub mod pgcluster;
pub mod pgcount;
pub mod proxies;
pub mod smtp;
pub mod sse;
pub mod teams;
pub mod traffic;
pub mod webdriver;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use consoled::config::Config;
use serde_json::{json, Value};

/// The database of this test binary: a fresh `consoled_t_<binary>` database next to
/// DATABASE_URL's, so that one binary's leftovers (queued mail, leases, rate events) never meet
/// another's background threads. Falls back to DATABASE_URL itself when its role may not create
/// databases.
pub fn database_url() -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let base = std::env::var("DATABASE_URL")
            .expect("DATABASE_URL must point at a PostgreSQL database (make test sets it)");
        let exe = std::env::current_exe().unwrap();
        let stem = exe.file_stem().unwrap().to_string_lossy().to_string();
        let binary = stem
            .rsplit_once('-')
            .map_or(stem.as_str(), |(b, _)| b)
            .to_string();
        // A copy of a test binary running beside it (in a namespace of its own) names its own.
        let copy = std::env::var("CONSOLED_TEST_DATABASE_SUFFIX").unwrap_or_default();
        let name = format!(
            "consoled_t_{}",
            (binary + &copy).replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        );
        let mut admin =
            postgres::Client::connect(&base, postgres::NoTls).expect("connect to DATABASE_URL");
        // Two statements: DROP DATABASE cannot run inside the implicit transaction of a
        // multi-statement query.
        let created = admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .and_then(|()| admin.batch_execute(&format!("CREATE DATABASE {name}")));
        match created {
            Ok(()) => with_database(&base, &name),
            // A role without CREATEDB on someone's existing server: share its database.
            Err(e) if e.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
                eprintln!("tests use DATABASE_URL itself: cannot create {name}: {e}");
                base
            }
            Err(e) => panic!("cannot create the test database {name}: {e}"),
        }
    })
    .clone()
}

/// `url` with its database name replaced.
pub fn with_database(url: &str, name: &str) -> String {
    let (head, query) = url
        .split_once('?')
        .map_or((url, None), |(h, q)| (h, Some(q)));
    let cut = head
        .rfind('/')
        .filter(|&i| i > head.find("://").map_or(0, |j| j + 2))
        .unwrap_or(head.len());
    let mut out = format!("{}/{name}", &head[..cut]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

pub fn db() -> postgres::Client {
    postgres::Client::connect(&database_url(), postgres::NoTls)
        .expect("connect to the test database")
}

/// Provider accounts linked to a user.
pub fn links_of(user_id: i64) -> i64 {
    db().query_one(
        "SELECT count(*) FROM external_identities WHERE user_id = $1",
        &[&user_id],
    )
    .unwrap()
    .get(0)
}

/// A full session of `user_id` written straight into the database (for states the service itself
/// no longer creates); returns its token.
pub fn insert_session(c: &mut impl postgres::GenericClient, user_id: i64) -> String {
    let token = consoled::crypto::new_token();
    c.execute(
        "INSERT INTO sessions (token_hash, user_id, mfa_pending, expires_at)
         VALUES ($1, $2, false, now() + interval '1 hour')",
        &[&consoled::crypto::token_hash(&token), &user_id],
    )
    .unwrap();
    token
}

static SEQ: AtomicU32 = AtomicU32::new(1);

/// A value unique to this test process run: for emails and client addresses.
pub fn unique() -> String {
    let n = SEQ.fetch_add(1, Ordering::SeqCst);
    format!(
        "{}-{}-{}",
        std::process::id(),
        n,
        consoled::crypto::b64url(&consoled::crypto::random_bytes::<4>()).to_lowercase()
    )
}

pub fn unique_email() -> String {
    format!("user-{}@example.com", unique())
}

/// A distinct client IP per call, sent as X-Forwarded-For (the test server trusts 127.0.0.1),
/// so per-IP limits of one test do not touch another.
pub fn unique_ip() -> String {
    let n = SEQ.fetch_add(1, Ordering::SeqCst) ^ (std::process::id() << 12);
    format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
}

pub struct TestServer {
    pub service: Option<consoled::Service>,
    pub addr: SocketAddr,
    pub mail_dir: tempdir::TempDir,
}

pub mod tempdir {
    /// A directory removed on drop.
    pub struct TempDir(pub std::path::PathBuf);
    impl TempDir {
        pub fn new() -> TempDir {
            let p = std::env::temp_dir().join(format!("consoled-test-{}", super::unique()));
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl TestServer {
    pub fn start() -> TestServer {
        TestServer::with(&[])
    }

    /// Starts a server with extra environment variables (overriding the test defaults).
    pub fn with(extra: &[(&str, &str)]) -> TestServer {
        let mail_dir = tempdir::TempDir::new();
        let config = test_config(&mail_dir.0, extra);
        let listener =
            consoled::server::bind("127.0.0.1:0".parse().unwrap(), config.read_timeout).unwrap();
        let service = consoled::serve_on(config, listener).expect("start server");
        let addr = service.addr();
        TestServer {
            service: Some(service),
            addr,
            mail_dir,
        }
    }

    pub fn client(&self) -> Client {
        Client::new(self.addr)
    }

    pub fn app(&self) -> &consoled::app::App {
        &self.service.as_ref().unwrap().app
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.service.take() {
            s.shutdown(Duration::from_secs(5));
        }
    }
}

pub fn test_config(mail_dir: &std::path::Path, extra: &[(&str, &str)]) -> Config {
    let mut vars: HashMap<String, String> = HashMap::new();
    vars.insert("DATABASE_URL".into(), database_url());
    vars.insert("CONSOLED_LISTEN".into(), "127.0.0.1:0".into());
    vars.insert("CONSOLED_COOKIE_SECURE".into(), "false".into());
    vars.insert("CONSOLED_TRUSTED_PROXIES".into(), "127.0.0.1".into());
    vars.insert("CONSOLED_MAIL_DIR".into(), mail_dir.display().to_string());
    vars.insert("CONSOLED_DB_POOL".into(), "4".into());
    vars.insert("CONSOLED_WORKERS".into(), "8".into());
    vars.insert("CONSOLED_HASH_THREADS".into(), "1".into());
    // Every test server shares one database, and a sender takes any due mail: only the mail
    // tests (which run one at a time) turn it on.
    vars.insert("CONSOLED_MAIL_SENDER".into(), "false".into());
    for (k, v) in extra {
        vars.insert(k.to_string(), v.to_string());
    }
    Config::from_vars(vars).expect("test config")
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The error code of a JSON error body.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The `Set-Cookie` header for `name`.
    pub fn set_cookie(&self, name: &str) -> Option<&str> {
        self.headers_named("set-cookie")
            .into_iter()
            .find(|c| c.starts_with(&format!("{name}=")))
    }

    #[track_caller]
    pub fn expect(&self, status: u16) -> &Response {
        assert_eq!(
            self.status,
            status,
            "unexpected status; body: {}",
            String::from_utf8_lossy(&self.body)
        );
        self
    }

    #[track_caller]
    pub fn expect_error(&self, status: u16, code: &str) -> &Response {
        self.expect(status);
        assert_eq!(
            self.code(),
            code,
            "body: {}",
            String::from_utf8_lossy(&self.body)
        );
        assert!(!self.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .is_empty());
        self
    }
}

/// A raw HTTP/1.1 client, one connection per request, with a cookie jar.
#[derive(Clone)]
pub struct Client {
    pub addr: SocketAddr,
    pub cookies: HashMap<String, String>,
    pub ip: String,
    pub extra_headers: Vec<(String, String)>,
    /// The `svc_session` cookie the jar held when its `svc_csrf` cookie was last known good: the
    /// token is bound to the session, so a session planted in the jar by hand needs a new one.
    csrf_session: Option<String>,
}

impl Client {
    pub fn new(addr: SocketAddr) -> Client {
        Client {
            addr,
            cookies: HashMap::new(),
            ip: unique_ip(),
            extra_headers: Vec::new(),
            csrf_session: None,
        }
    }

    fn cookie_header(&self) -> Option<String> {
        if self.cookies.is_empty() {
            return None;
        }
        Some(
            self.cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; "),
        )
    }

    /// Sends a request with the jar's cookies; stores cookies the response sets.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let mut all: Vec<(String, String)> = vec![("X-Forwarded-For".into(), self.ip.clone())];
        all.extend(self.extra_headers.iter().cloned());
        if let Some(c) = self.cookie_header() {
            all.push(("Cookie".into(), c));
        }
        all.extend(headers.iter().map(|(n, v)| (n.to_string(), v.to_string())));
        let response = raw_request(self.addr, method, path, &all, body);
        for c in response.headers_named("set-cookie") {
            let pair = c.split(';').next().unwrap_or("");
            if let Some((k, v)) = pair.split_once('=') {
                if v.is_empty() || c.contains("Max-Age=0") {
                    self.cookies.remove(k);
                } else {
                    self.cookies.insert(k.to_string(), v.to_string());
                }
            }
        }
        // The server re-issues svc_csrf with every change of svc_session (after it in the head).
        if response.set_cookie("svc_csrf").is_some() {
            self.csrf_session = self.cookies.get("svc_session").cloned();
        }
        response
    }

    pub fn get(&mut self, path: &str) -> Response {
        self.send("GET", path, &[], b"")
    }

    /// Makes sure the jar has a CSRF cookie for the session it holds (asking GET /auth/csrf when
    /// it has none, or when the session was put in the jar by hand).
    pub fn csrf(&mut self) -> String {
        let session = self.cookies.get("svc_session").cloned();
        if !self.cookies.contains_key("svc_csrf") || self.csrf_session != session {
            self.get("/auth/csrf").expect(204);
            self.csrf_session = session;
        }
        self.cookies["svc_csrf"].clone()
    }

    /// POST with JSON body and a valid CSRF header.
    pub fn post(&mut self, path: &str, body: &Value) -> Response {
        let token = self.csrf();
        let body = serde_json::to_vec(body).unwrap();
        self.send(
            "POST",
            path,
            &[
                ("Content-Type", "application/json"),
                ("X-CSRF-Token", &token),
            ],
            &body,
        )
    }

    /// POST without a body (logout, resend), with CSRF.
    pub fn post_empty(&mut self, path: &str) -> Response {
        let token = self.csrf();
        self.send("POST", path, &[("X-CSRF-Token", &token)], b"")
    }

    /// Signs up a fresh account; returns its email and the Auth state.
    pub fn signup(&mut self) -> (String, Value) {
        let email = unique_email();
        let r = self.post(
            "/auth/signup",
            &json!({"email": email, "password": PASSWORD, "name": "Test User"}),
        );
        r.expect(201);
        (email, r.json())
    }

    pub fn login(&mut self, email: &str, password: &str) -> Response {
        self.post(
            "/auth/login",
            &json!({"email": email, "password": password}),
        )
    }
}

pub const PASSWORD: &str = "correct horse battery";

/// One request on a fresh connection; reads the whole response.
pub fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    read_response(&mut BufReader::new(stream))
}

pub fn read_head(reader: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("bad status line {line:?}"))
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        reader.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').unwrap();
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    (status, headers)
}

pub fn read_response(reader: &mut impl BufRead) -> Response {
    let (status, headers) = read_head(reader);
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if let Some(len) = get("content-length") {
        body.resize(len.parse().unwrap(), 0);
        reader.read_exact(&mut body).unwrap();
    } else if get("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        reader.read_to_end(&mut body).unwrap();
    }
    Response {
        status,
        headers,
        body,
    }
}

/// A TCP proxy in front of PostgreSQL that a test can cut (every connection dropped, new ones
/// refused) and restore: a database outage without stopping the shared test cluster.
pub struct DbProxy {
    pub port: u16,
    state: std::sync::Arc<std::sync::Mutex<ProxyState>>,
}

#[derive(Default)]
struct ProxyState {
    up: bool,
    conns: Vec<TcpStream>,
    /// Silent: new connections are accepted and never answered (a blackhole).
    stalled: bool,
    held: Vec<TcpStream>,
}

impl DbProxy {
    pub fn start() -> DbProxy {
        let target = db_target();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = std::sync::Arc::new(std::sync::Mutex::new(ProxyState {
            up: true,
            ..ProxyState::default()
        }));
        let st = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if st.lock().unwrap().stalled {
                    st.lock().unwrap().held.push(client);
                    continue;
                }
                if !st.lock().unwrap().up {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                {
                    let mut s = st.lock().unwrap();
                    // Cut or stalled while this one was being connected: it must not survive.
                    if !s.up || s.stalled {
                        continue;
                    }
                    s.conns.push(client.try_clone().unwrap());
                    s.conns.push(server.try_clone().unwrap());
                }
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        DbProxy { port, state }
    }

    /// DATABASE_URL through the proxy.
    pub fn url(&self) -> String {
        let url = database_url();
        let target = db_target();
        url.replacen(&target, &format!("127.0.0.1:{}", self.port), 1)
    }

    pub fn cut(&self) {
        let mut s = self.state.lock().unwrap();
        s.up = false;
        for c in s.conns.drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn restore(&self) {
        let mut s = self.state.lock().unwrap();
        s.up = true;
        s.stalled = false;
        s.held.clear();
    }

    /// A database that stops answering: open connections are cut, new ones are accepted and
    /// then hear nothing (as from a host that went silent behind a firewall).
    pub fn stall(&self) {
        self.cut();
        self.state.lock().unwrap().stalled = true;
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
}

/// host:port of DATABASE_URL (the test cluster listens on TCP).
/// This test binary's database, reached through a loopback proxy on `port` (a round-trip
/// counter, PgBouncer) instead of directly.
pub fn database_url_via(port: u16) -> String {
    database_url().replacen(&db_target(), &format!("127.0.0.1:{port}"), 1)
}

/// The project of the first organization in a signed-up user's `state` (`/auth/session`).
pub fn project_of(state: &Value) -> i64 {
    let org = state["organizations"][0]["id"].as_i64().unwrap();
    db().query_one("SELECT id FROM projects WHERE org_id = $1", &[&org])
        .unwrap()
        .get(0)
}

pub fn db_target() -> String {
    let url = database_url();
    let after = url.split("://").nth(1).unwrap();
    let authority = after.split('/').next().unwrap();
    let hostport = authority.rsplit('@').next().unwrap();
    if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:5432")
    }
}

/// Whether process `pid` holds a socket listening on TCP `port`. A port found free and then
/// given to a child process may be taken by another test's server meanwhile (both probed the
/// same free port; the second child then cannot bind it), and connections to the port would
/// reach that other server: a child counts as serving only once this holds.
pub fn listens_on(pid: u32, port: u16) -> bool {
    let suffix = format!(":{port:04X}");
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    (f.len() > 9 && f[3] == "0A" && f[1].ends_with(&suffix))
                        .then(|| format!("socket:[{}]", f[9]))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.filter_map(Result::ok)
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .any(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}
