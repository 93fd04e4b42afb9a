//! Randomized hostile input (issue 7 §6), deterministic per seed (`FUZZ_SEED=n` repeats a run):
//! the parsing layer in-process (cookies, Authorization, client address, query, media type,
//! CSRF, JSON fields, email, password, name) and then random requests against every route of a
//! live server (methods, paths, headers, cookies, bodies, TOTP codes, token shapes). No input may
//! panic, hang, or produce a 5xx.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use common::*;
use consoled::http::client::{Source, FORWARDED_FOR};
use consoled::http::json::{parse_name, Email, Fields, Password};
use consoled::http::{cookies, csrf, Method, Request};
use serde_json::{json, Value};

/// xorshift64*: small, deterministic, good enough to spread inputs.
struct Rng(u64);

impl Rng {
    fn from_env() -> Rng {
        let seed = std::env::var("FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(7);
        eprintln!("FUZZ_SEED={seed}");
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len())]
    }

    /// A length that is usually short, sometimes at a limit, rarely large.
    fn len(&mut self) -> usize {
        match self.below(20) {
            0 => 5000 + self.below(5000),
            1 => *[6, 16, 43, 64, 65, 128, 256, 257, 1024]
                .get(self.below(9))
                .unwrap(),
            _ => self.below(40),
        }
    }

    /// A string mixing the characters parsers trip on.
    fn text(&mut self, ascii_only: bool) -> String {
        const SPECIAL: &[char] = &[
            ';', '=', '"', ',', ' ', '\t', '%', '+', '&', '?', '/', '\\', ':', '@', '.', '-', '_',
            '{', '}', '[', ']', '\'', '<', '>', '#', '*', '0', '9', 'a', 'Z',
        ];
        const WIDE: &[char] = &[
            'é', 'ß', '😀', '\u{0}', '\u{7f}', '\u{202e}', 'Ω', '\u{feff}',
        ];
        let n = self.len();
        (0..n)
            .map(|_| match self.below(10) {
                0..=3 => SPECIAL[self.below(SPECIAL.len())],
                4 if !ascii_only => WIDE[self.below(WIDE.len())],
                _ => (b' ' + self.below(95) as u8) as char,
            })
            .collect()
    }

    /// A header value tiny_http accepts (printable ASCII, no CR/LF), so that handlers see it.
    fn header_value(&mut self) -> String {
        self.text(true)
            .chars()
            .filter(|c| (' '..='~').contains(c))
            .collect()
    }

    fn json(&mut self, depth: usize) -> Value {
        match self.below(if depth > 2 { 5 } else { 7 }) {
            0 => Value::Null,
            1 => json!(self.chance(50)),
            2 => json!(self.next() as i64),
            3 => json!(f64::from_bits(self.next()).is_finite().then_some(1.5e300)),
            4 => json!(self.text(false)),
            5 => Value::Array((0..self.below(4)).map(|_| self.json(depth + 1)).collect()),
            _ => Value::Object(
                (0..self.below(4))
                    .map(|_| (self.text(false), self.json(depth + 1)))
                    .collect(),
            ),
        }
    }
}

/// Runs one case; on a panic, names the input before failing.
fn case(what: &str, input: &dyn std::fmt::Debug, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        panic!("{what} panicked on {input:?}");
    }
}

#[test]
fn the_parsing_layer_never_panics_and_fails_only_with_4xx() {
    let mut rng = Rng::from_env();
    let origins = ["http://localhost:8080".to_string()];
    let source = |header: &str| Source {
        trusted_proxies: vec!["127.0.0.1".parse().unwrap()],
        header: header.into(),
    };
    let (forwarded, real_ip) = (source(FORWARDED_FOR), source("x-real-ip"));
    // A token we signed (pre-session), so that the CSRF rule's accepting path is reached too.
    let key = [9u8; 32];
    let signed = csrf::issue(&key, None);
    for _ in 0..3000 {
        let header = rng.text(false);
        let name = rng
            .pick(&["svc_session", "svc_csrf", "", "a", "svc_session "])
            .to_string();
        case("cookies::find", &(&header, &name), || {
            if let Some(v) = cookies::find(&header, &name) {
                assert!(!v.contains(';'), "a value spans pairs: {v:?}");
            }
        });

        let target = format!("/{}", rng.text(false));
        let mut req = Request::new(Method::parse(&rng.text(true)), &target);
        req.peer = Some(SocketAddr::from(([127, 0, 0, 1], 1234)));
        for h in [
            "authorization",
            "cookie",
            "content-type",
            "origin",
            "sec-fetch-site",
            "x-csrf-token",
            "x-forwarded-for",
            "x-real-ip",
        ] {
            if rng.chance(70) {
                let value = if h == "cookie" && rng.chance(30) {
                    format!("svc_csrf={signed}")
                } else if h == "x-csrf-token" && rng.chance(30) {
                    signed.clone()
                } else if h == "cookie" && rng.chance(50) {
                    format!("svc_csrf={}; x={}", rng.text(true), rng.text(true))
                } else if h == "authorization" && rng.chance(50) {
                    format!(
                        "{} {}",
                        rng.pick(&["Bearer", "bearer", "Basic", ""]),
                        rng.text(true)
                    )
                } else {
                    rng.text(false)
                };
                req.headers.push((h.to_string(), value));
            }
        }
        req.body = if rng.chance(50) {
            serde_json::to_vec(&rng.json(0)).unwrap()
        } else {
            rng.text(false).into_bytes()
        };
        case("Request accessors", &req.headers, || {
            let _ = req.query_param(&rng.text(true));
            if let Some(token) = req.bearer() {
                assert!(!token.is_empty() && token.len() <= 256);
                assert!(token.bytes().all(|b| b.is_ascii_graphic()));
            }
            assert!(req.client(&forwarded).ip().is_some());
            assert!(req.client(&real_ip).ip().is_some());
            match req.require_json() {
                Ok(()) => assert!(
                    req.body.is_empty()
                        || req.header("content-type").is_some_and(|ct| ct
                            .to_ascii_lowercase()
                            .trim_start()
                            .starts_with("application/json"))
                ),
                Err(e) => assert_eq!(e.code.status(), 415),
            }
            match csrf::check(&req, &origins, &key, None, || false) {
                Ok(()) => {
                    let cookie = req.cookie("svc_csrf").unwrap();
                    assert_eq!(cookie, req.header("x-csrf-token").unwrap().trim());
                    assert!(csrf::valid(&key, &cookie, None));
                }
                Err(e) => assert_eq!(e.code.status(), 403),
            }
        });

        let body = req.body.clone();
        case("json fields", &String::from_utf8_lossy(&body), || {
            if let Ok(fields) = Fields::parse(&body) {
                for field in ["email", "password", "name", "code", "token"] {
                    let _ = fields
                        .string(field)
                        .map_err(|e| assert!(e.code.status() < 500));
                }
            }
        });
        let raw = rng.text(false);
        case("email/password/name", &raw, || {
            for status in [
                Email::parse(&raw).err().map(|e| e.code.status()),
                Password::parse(&raw, "password")
                    .err()
                    .map(|e| e.code.status()),
                parse_name(&raw).err().map(|e| e.code.status()),
            ]
            .into_iter()
            .flatten()
            {
                assert!(status < 500, "{status}");
            }
            if let Ok(email) = Email::parse(&raw) {
                assert!(email.as_str().contains('@'));
            }
        });
    }
}

/// Sends one request on its own connection; returns the status (0: closed without an answer)
/// and fails if no answer (or close) comes within 5 s.
fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let _ = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(body));
    let t = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(2).any(|w| w == b"\r\n") {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{method} {path}: no answer after {:?}: {e}", t.elapsed()),
        }
    }
    let line = String::from_utf8_lossy(&got);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Every route with its method, and a few near misses.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/auth/csrf"),
    ("GET", "/auth/providers"),
    ("POST", "/auth/signup"),
    ("POST", "/auth/login"),
    ("GET", "/auth/session"),
    ("POST", "/auth/mfa/totp"),
    ("POST", "/auth/mfa/totp/setup"),
    ("POST", "/auth/mfa/totp/enable"),
    ("POST", "/auth/mfa/totp/disable"),
    ("POST", "/auth/mfa/recovery-codes"),
    ("POST", "/auth/verify-email"),
    ("POST", "/auth/verify-email/resend"),
    ("POST", "/auth/password/forgot"),
    ("POST", "/auth/password/reset"),
    ("GET", "/auth/oauth/github/start"),
    ("GET", "/auth/oauth/github/callback"),
    ("GET", "/auth/oauth/google/callback"),
    ("GET", "/v1/events"),
    ("GET", "/auth/check"),
    ("GET", "/v1/projects/1/tokens"),
    ("POST", "/v1/projects/1/tokens"),
    ("DELETE", "/v1/projects/1/tokens/1"),
    ("GET", "/v1/projects/99999999999999999999/tokens"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
    ("GET", "/"),
    ("POST", "/auth/"),
    ("POST", "//auth/login"),
    ("POST", "/auth/login/"),
    ("GET", "/auth/%2e%2e/metrics"),
];

const FIELDS: &[&str] = &[
    "email",
    "password",
    "name",
    "code",
    "token",
    "new_password",
    "state",
];

#[test]
fn random_requests_to_every_route_get_no_5xx_no_panic_and_no_hang() {
    let server = TestServer::start();
    let addr = server.addr;
    let mut rng = Rng::from_env();
    // A real session with a second factor being set up, so that random codes reach the TOTP
    // parser and random bodies reach the handlers behind the session and CSRF checks.
    let mut me = server.client();
    let (email, _) = me.signup();
    me.post_empty("/auth/mfa/totp/setup").expect(200);
    let session = me.cookies["svc_session"].clone();
    let csrf = me.csrf();
    let started = Instant::now();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..600 {
        let (right, path) = ROUTES[rng.below(ROUTES.len())];
        let method = if rng.chance(80) {
            right
        } else {
            rng.pick(&[
                "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW",
            ])
        };
        let mut path = path.to_string();
        if rng.chance(25) {
            path.push_str(&format!(
                "?{}={}",
                rng.header_value().replace([' ', '#'], "+"),
                rng.below(9)
            ));
        }
        // Logging out or resetting would end the session the other cases rely on.
        let own = !path.contains("logout") && !path.contains("password");
        let mut headers = vec![("X-Forwarded-For".to_string(), unique_ip())];
        let mut cookie = Vec::new();
        if own && rng.chance(60) {
            cookie.push(format!("svc_session={session}"));
        } else if rng.chance(30) {
            cookie.push(format!(
                "svc_session={}",
                rng.header_value().replace(';', "")
            ));
        }
        if rng.chance(85) {
            cookie.push(format!("svc_csrf={csrf}"));
        }
        if rng.chance(20) {
            cookie.push(rng.header_value());
        }
        if !cookie.is_empty() {
            headers.push(("Cookie".into(), cookie.join("; ")));
        }
        if rng.chance(70) {
            let token = if rng.chance(70) {
                csrf.clone()
            } else {
                rng.header_value()
            };
            headers.push(("X-CSRF-Token".into(), token));
        }
        if rng.chance(25) {
            let token = match rng.below(5) {
                0 => format!("Bearer csd_{}", rng.header_value().replace(' ', "")),
                4 => format!("Bearer csdt_{}", rng.header_value().replace(' ', "")),
                1 => format!("Bearer {}", "A".repeat(rng.len())),
                2 => rng.header_value(),
                _ => format!("Basic {}", rng.header_value()),
            };
            headers.push(("Authorization".into(), token));
        }
        if rng.chance(15) {
            let name = rng.pick(&["X-Original-Method", "X-Forwarded-Method"]);
            let method = if rng.chance(50) {
                rng.pick(&["GET", "POST", "DELETE", "OPTIONS"]).to_string()
            } else {
                rng.header_value()
            };
            headers.push((name.into(), method));
        }
        let content_type = rng.pick(&[
            "application/json",
            "application/json; charset=utf-8",
            "text/plain",
            "",
            "APPLICATION/JSON",
        ]);
        if rng.chance(80) {
            headers.push(("Content-Type".into(), content_type.to_string()));
        }
        for (name, values) in [
            (
                "Origin",
                &["http://localhost:8080", "https://evil.example", "null", ""][..],
            ),
            (
                "Sec-Fetch-Site",
                &["same-origin", "cross-site", "none", "CROSS-SITE"][..],
            ),
            (
                "Last-Event-ID",
                &["0", "-1", "99999999999999999999", "x"][..],
            ),
        ] {
            if rng.chance(15) {
                headers.push((name.into(), rng.pick(values).to_string()));
            }
        }
        let body = match rng.below(4) {
            0 => Vec::new(),
            1 => rng.text(false).into_bytes(),
            2 => serde_json::to_vec(&rng.json(0)).unwrap(),
            _ => {
                let mut fields = serde_json::Map::new();
                for f in FIELDS {
                    if rng.chance(50) {
                        let v = match rng.below(5) {
                            0 => json!(email),
                            1 => json!(format!("{:06}", rng.below(1_000_000))),
                            2 => json!(rng.text(false)),
                            3 => rng.json(1),
                            _ => json!(PASSWORD),
                        };
                        fields.insert(f.to_string(), v);
                    }
                }
                serde_json::to_vec(&Value::Object(fields)).unwrap()
            }
        };
        let status = send(addr, method, &path, &headers, &body);
        *statuses.entry(status).or_default() += 1;
        assert!(
            status < 500 || (status == 503 && path == "/readyz"),
            "case {i}: {method} {path} {headers:?} {:?} -> {status}",
            String::from_utf8_lossy(&body)
        );
    }
    eprintln!("statuses: {statuses:?} in {:?}", started.elapsed());
    let metrics = server.client().get("/metrics");
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.lines().any(|l| l == "consoled_handler_panics_total 0"),
        "a handler panicked"
    );
    // The server is still fully working.
    me.get("/auth/session").expect(200);
}
