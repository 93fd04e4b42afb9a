//! The shipped proxy example in front of the real service: Debian's nginx runs
//! `contrib/nginx.conf` as shipped (only its addresses, ports and TLS replaced here) in front of
//! the `consoled` binary configured as `contrib/consoled.env` says, and browsers connect from
//! their own loopback addresses (127.0.0.2, 127.0.0.3, ...). Each browser must be counted by its
//! own address on `/auth/` (failed sign-ins) and on `/v1/events` (its share of the streams), and
//! no header a browser sends itself (`X-Real-IP`, `X-Forwarded-For`) may choose the address.
//!
//! `make test` installs Debian's nginx first (scripts/proxy-deps.sh, as root); where nginx cannot
//! be had the nginx test prints that it is skipped. The check of the file itself always runs.

mod common;

use std::io::{BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::sse;
use common::tempdir::TempDir;
use serde_json::json;

const NGINX_CONF: &str = include_str!("../contrib/nginx.conf");
const CONSOLED_ENV: &str = include_str!("../contrib/consoled.env");

/// A setting of `contrib/consoled.env`.
fn env_setting(name: &str) -> String {
    CONSOLED_ENV
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("contrib/consoled.env sets no {name}"))
        .trim()
        .to_string()
}

/// The `location` blocks of an nginx file: (the line that opens it, its body).
fn locations(conf: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = conf;
    while let Some(at) = rest.find("location ") {
        let open = at + rest[at..].find('{').expect("a location's {");
        let mut depth = 0;
        let mut end = open;
        for (i, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = open + i;
                break;
            }
        }
        out.push((
            rest[at..open].trim().to_string(),
            rest[open + 1..end].to_string(),
        ));
        rest = &rest[end..];
    }
    out
}

fn directives<'a>(block: &'a str, name: &str) -> Vec<&'a str> {
    block
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| l.starts_with(&format!("{name} ")))
        .collect()
}

/// In nginx, one `proxy_set_header` in a location drops every `proxy_set_header` of the server
/// block there: every location that reaches consoled must then set the client-address header
/// `contrib/consoled.env` names itself (or, better, set none and inherit the server's).
#[test]
fn every_location_that_reaches_consoled_sets_the_client_address_header() {
    let header = env_setting("CONSOLED_CLIENT_IP_HEADER").to_ascii_lowercase();
    let server_level = NGINX_CONF
        .lines()
        .map(str::trim)
        .any(|l| l.to_ascii_lowercase() == format!("proxy_set_header {header} $remote_addr;"));
    assert!(server_level, "the server block must set {header}");
    let mut proxied = 0;
    for (opening, body) in locations(NGINX_CONF) {
        if directives(&body, "proxy_pass").is_empty() {
            continue;
        }
        proxied += 1;
        let own = directives(&body, "proxy_set_header");
        if own.is_empty() {
            continue; // inherits the server block's lines
        }
        assert!(
            own.iter()
                .any(|l| l.to_ascii_lowercase()
                    == format!("proxy_set_header {header} $remote_addr;")),
            "`{opening}` has its own proxy_set_header lines, so it inherits none, and {header} \
             is not among them: a browser's own {header} would reach consoled"
        );
    }
    assert!(
        proxied >= 2,
        "no proxied locations found in contrib/nginx.conf"
    );
}

/// An address and free port on `ip`.
fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
}

fn find_nginx() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// `contrib/nginx.conf` with only its addresses, ports and TLS replaced: the upstream is the
/// test's consoled, the listeners loopback ports, and TLS (certificates, `ssl`, `http2`) is off
/// so the test speaks plain HTTP/1.1. Everything else is the shipped file, byte for byte.
fn substituted_conf(upstream: SocketAddr, http: u16, https: u16, v6: Option<(u16, u16)>) -> String {
    let mut out = String::new();
    for line in NGINX_CONF.lines() {
        let t = line.trim();
        let replaced = match t {
            "server 127.0.0.1:8080;" => Some(format!("server {upstream};")),
            "listen 80;" => Some(format!("listen 127.0.0.1:{http};")),
            "listen 443 ssl http2;" => Some(format!("listen 127.0.0.1:{https};")),
            "listen [::]:80;" => {
                Some(v6.map_or(String::new(), |p| format!("listen [::1]:{};", p.0)))
            }
            "listen [::]:443 ssl http2;" => {
                Some(v6.map_or(String::new(), |p| format!("listen [::1]:{};", p.1)))
            }
            _ if t.starts_with("ssl_") => Some(String::new()),
            _ => None,
        };
        match replaced {
            Some(r) => out.push_str(&format!("    {r}\n")),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for must in [
        "server 127.0.0.1:8080;",
        "listen 443 ssl http2;",
        "ssl_certificate ",
    ] {
        assert!(!out.contains(must), "the substitution missed {must:?}");
    }
    out
}

struct Nginx {
    child: Child,
    dir: TempDir,
    pub addr: SocketAddr,
}

impl Nginx {
    fn start(bin: &Path, upstream: SocketAddr) -> Nginx {
        let dir = TempDir::new();
        let (http, https) = (free_port("127.0.0.1"), free_port("127.0.0.1"));
        let v6 = TcpListener::bind("[::1]:0")
            .ok()
            .map(|_| (free_port("::1"), free_port("::1")));
        let site = dir.0.join("consoled.conf");
        std::fs::write(&site, substituted_conf(upstream, http, https, v6)).unwrap();
        let d = dir.0.display();
        // The main file a Debian install has around the site file: one process in the foreground,
        // every path in the test's directory.
        let main = format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
             events {{ worker_connections 512; }}\n\
             http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  \
             proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  include {};\n}}\n",
            site.display()
        );
        let conf = dir.0.join("nginx.conf");
        std::fs::write(&conf, main).unwrap();
        let test = Command::new(bin)
            .args(["-t", "-p"])
            .arg(&dir.0)
            .arg("-e")
            .arg(dir.0.join("error.log"))
            .arg("-c")
            .arg(&conf)
            .output()
            .expect("run nginx -t");
        assert!(
            test.status.success(),
            "nginx -t refuses contrib/nginx.conf: {}",
            String::from_utf8_lossy(&test.stderr)
        );
        let child = Command::new(bin)
            .arg("-p")
            .arg(&dir.0)
            .arg("-e")
            .arg(dir.0.join("error.log"))
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let addr: SocketAddr = format!("127.0.0.1:{https}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "nginx did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Nginx { child, dir, addr }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.0.join("error.log")).unwrap_or_default();
            eprintln!("nginx error.log:\n{log}");
        }
    }
}

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
    ) -> common::Response {
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
        common::read_response(&mut BufReader::new(stream))
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
        let body = json!({"email": common::unique_email(), "password": "not the password"});
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

/// As `contrib/consoled.env` ships it: `X-Real-IP`.
#[test]
fn behind_the_shipped_nginx_each_browser_is_counted_by_its_own_address() {
    counted_by_own_address(&env_setting("CONSOLED_CLIENT_IP_HEADER"), "127.0.0");
}

/// The other shape `contrib/nginx.conf` supports: consoled's default header, `X-Forwarded-For`.
#[test]
fn behind_the_shipped_nginx_with_x_forwarded_for_each_browser_is_counted_too() {
    counted_by_own_address("X-Forwarded-For", "127.0.1");
}

/// The browsers connect from `{net}.2` to `{net}.5`.
fn counted_by_own_address(header: &str, net: &str) {
    let Some(nginx) = find_nginx() else {
        println!(
            "SKIPPED: nginx is not installed (as root, `make test` installs Debian's nginx \
             through scripts/proxy-deps.sh; or apt-get install nginx)"
        );
        return;
    };
    let trusted = env_setting("CONSOLED_TRUSTED_PROXIES");
    // 8 streams on the instance, a quarter per address: 2 streams each. 3 failed sign-ins per
    // address, whatever the accounts.
    let server = common::binary::Spawned::start(
        env!("CARGO_BIN_EXE_consoled"),
        &[
            ("CONSOLED_CLIENT_IP_HEADER", header),
            ("CONSOLED_TRUSTED_PROXIES", &trusted),
            ("CONSOLED_MAX_STREAMS", "8"),
            ("CONSOLED_CLIENT_SHARE", "0.25"),
            ("CONSOLED_LOGIN_FAILURES_PER_CLIENT", "3"),
        ],
    );
    let proxy = Nginx::start(&nginx, server.addr);

    // /auth/: the first browser spends its failed sign-ins; forged headers do not reset them.
    let mut a = Browser::new(&format!("{net}.2"), proxy.addr);
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
    let mut b = Browser::new(&format!("{net}.3"), proxy.addr);
    let a_ip = format!("{net}.2");
    assert_eq!(b.failed_login(&[("X-Real-IP", &a_ip)]), 401);
    assert_eq!(b.failed_login(&[("X-Forwarded-For", &a_ip)]), 401);
    assert_eq!(b.failed_login(&[]), 401);
    assert_eq!(b.failed_login(&[]), 429, "the fourth failure from {net}.3");

    // /v1/events: one user's session (its limit of 10 streams is not what is tested here).
    let mut direct = common::Client::new(server.addr);
    direct.signup();
    let session = direct.cookies["svc_session"].clone();
    let c = Browser::new(&format!("{net}.4"), proxy.addr);
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
    let d = Browser::new(&format!("{net}.5"), proxy.addr);
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
