//! Browsers behind a proxy, each connecting from its own loopback address (127.0.0.2,
//! 127.0.0.3, ...), and what they must see: each counted by its own address on `/auth/` (failed
//! sign-ins) and `/v1/events` (its share of the streams), whatever client-address headers it
//! sends itself. Used by tests/proxy.rs for every shipped proxy example.

use std::io::{BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::json;

use super::sse;

/// A browser: connections from its own loopback address.
struct Browser {
    ip: IpAddr,
    proxy: SocketAddr,
    csrf: Option<String>,
}

impl Browser {
    fn new(ip: &str, proxy: SocketAddr) -> Browser {
        Browser {
            ip: ip.parse().unwrap(),
            proxy,
            csrf: None,
        }
    }

    fn connect(&self) -> TcpStream {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a socket");
        socket
            .bind(&SocketAddr::new(self.ip, 0).into())
            .expect("bind the browser's loopback address");
        socket
            .connect(&self.proxy.into())
            .expect("connect to nginx");
        let stream: TcpStream = socket.into();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> super::Response {
        let mut stream = self.connect();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: console.example.com\r\nConnection: close\r\n"
        );
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        if method == "POST" {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        super::read_response(&mut BufReader::new(stream))
    }

    /// A failed sign-in (an unknown address each time, so that only the per-client budget
    /// fills), with extra headers; its status.
    fn failed_login(&mut self, headers: &[(&str, &str)]) -> u16 {
        if self.csrf.is_none() {
            let r = self.request("GET", "/auth/csrf", &[], b"");
            assert_eq!(r.status, 204, "GET /auth/csrf through nginx");
            let cookie = r
                .set_cookie("svc_csrf")
                .expect("the CSRF cookie")
                .to_string();
            self.csrf = Some(
                cookie
                    .split(';')
                    .next()
                    .unwrap()
                    .split_once('=')
                    .unwrap()
                    .1
                    .into(),
            );
        }
        let csrf = self.csrf.clone().unwrap();
        let cookie = format!("svc_csrf={csrf}");
        let body = json!({"email": super::unique_email(), "password": "not the password"});
        let mut all = vec![
            ("Content-Type", "application/json"),
            ("X-CSRF-Token", csrf.as_str()),
            ("Cookie", cookie.as_str()),
        ];
        all.extend_from_slice(headers);
        self.request("POST", "/auth/login", &all, body.to_string().as_bytes())
            .status
    }

    /// Opens `GET /v1/events` with the session cookie and extra headers.
    fn stream(&self, session: &str, headers: &[(&str, &str)]) -> sse::Sse {
        let cookie = format!("svc_session={session}");
        let mut all = vec![("Cookie", cookie.as_str())];
        all.extend_from_slice(headers);
        sse::open_on(self.connect(), self.proxy, &all)
    }
}

/// Headers a browser might send to be counted as someone else.
const FORGED: [[(&str, &str); 2]; 3] = [
    [("X-Real-IP", "9.9.9.9"), ("X-Forwarded-For", "9.9.9.9")],
    [("X-Real-IP", "127.0.0.9"), ("X-Forwarded-For", "127.0.0.9")],
    [
        ("X-Forwarded-For", "8.8.8.8, 127.0.0.1"),
        ("X-Real-IP", "127.0.0.1"),
    ],
];

/// The consoled settings the scenario needs besides the client-address ones: 8 streams on the
/// instance, a quarter per address (2 streams each), 3 failed sign-ins per address.
pub const LIMITS: [(&str, &str); 3] = [
    ("CONSOLED_MAX_STREAMS_PER_INSTANCE", "8"),
    ("CONSOLED_CLIENT_SHARE", "0.25"),
    ("CONSOLED_LOGIN_FAILURES_PER_CLIENT", "3"),
];

/// The scenario through `proxy`, in front of the consoled at `server`; the browsers connect
/// from `{net}.2` to `{net}.5`.
pub fn each_browser_is_counted_by_its_own_address(
    server: SocketAddr,
    proxy: SocketAddr,
    net: &str,
) {
    // /auth/: the first browser spends its failed sign-ins; forged headers do not reset them.
    let mut a = Browser::new(&format!("{net}.2"), proxy);
    for _ in 0..3 {
        assert_eq!(a.failed_login(&[]), 401);
    }
    assert_eq!(a.failed_login(&[]), 429, "the fourth failure from {net}.2");
    for forged in &FORGED {
        assert_eq!(
            a.failed_login(forged),
            429,
            "{net}.2 escaped its sign-in limit by sending {forged:?}"
        );
    }
    // The second browser is not counted as the first, and cannot spend the first's budget.
    let mut b = Browser::new(&format!("{net}.3"), proxy);
    let a_ip = format!("{net}.2");
    assert_eq!(b.failed_login(&[("X-Real-IP", &a_ip)]), 401);
    assert_eq!(b.failed_login(&[("X-Forwarded-For", &a_ip)]), 401);
    assert_eq!(b.failed_login(&[]), 401);
    assert_eq!(b.failed_login(&[]), 429, "the fourth failure from {net}.3");

    // /v1/events: one user's session (its limit of 10 streams is not what is tested here).
    let mut direct = super::Client::new(server);
    direct.signup();
    let session = direct.cookies["svc_session"].clone();
    let c = Browser::new(&format!("{net}.4"), proxy);
    let mut held: Vec<sse::Sse> = Vec::new();
    for _ in 0..2 {
        let s = c.stream(&session, &[]);
        assert_eq!(s.status, 200, "{}", s.head);
        held.push(s);
    }
    assert_eq!(
        c.stream(&session, &[]).status,
        429,
        "a third stream from {net}.4"
    );
    for forged in &FORGED {
        let s = c.stream(&session, forged);
        assert_eq!(
            s.status, 429,
            "{net}.4 opened a third stream by sending {forged:?}"
        );
    }
    // Another browser opens its own two, whatever it claims to be.
    let d = Browser::new(&format!("{net}.5"), proxy);
    let c_ip = format!("{net}.4");
    let first = d.stream(
        &session,
        &[("X-Real-IP", &c_ip), ("X-Forwarded-For", &c_ip)],
    );
    assert_eq!(
        first.status, 200,
        "{net}.5 counted as {net}.4: {}",
        first.head
    );
    held.push(first);
    let second = d.stream(&session, &[]);
    assert_eq!(second.status, 200, "{}", second.head);
    held.push(second);
    assert_eq!(
        d.stream(&session, &[]).status,
        429,
        "a third stream from {net}.5"
    );
}
