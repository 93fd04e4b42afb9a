//! The shipped proxy examples in front of the real service: Debian's nginx runs
//! `contrib/nginx.conf`, and Debian's HAProxy `contrib/haproxy.cfg`, as shipped (only their
//! addresses, ports and TLS replaced here) in front of
//! the `consoled` binary configured as `contrib/consoled.env` says, and browsers connect from
//! their own loopback addresses (127.0.0.2, 127.0.0.3, ...). Each browser must be counted by its
//! own address on `/auth/` (failed sign-ins) and on `/v1/events` (its share of the streams), and
//! no header a browser sends itself (`X-Real-IP`, `X-Forwarded-For`) may choose the address.
//!
//! `make test` installs Debian's nginx and HAProxy first (scripts/proxy-deps.sh, as root); where
//! one cannot be had its tests print that they are skipped. The check of nginx.conf's
//! `proxy_set_header` lines always runs.

mod common;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::browsers;
use common::tempdir::TempDir;

const NGINX_CONF: &str = include_str!("../contrib/nginx.conf");
const CONSOLED_ENV: &str = include_str!("../contrib/consoled.env");
const HAPROXY_CFG: &str = include_str!("../contrib/haproxy.cfg");

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

/// The proxy's binary, where Debian (or a local build) puts it.
fn find(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/local/sbin", "/usr/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
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

/// A proxy running a substituted copy of a shipped example, in the foreground, its files in a
/// directory of its own.
struct Proxy {
    child: Child,
    dir: TempDir,
    log: PathBuf,
    pub addr: SocketAddr,
}

impl Proxy {
    fn nginx(bin: &Path, upstream: SocketAddr) -> Proxy {
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
        let log = dir.0.join("error.log");
        let args = |cmd: &mut Command| {
            cmd.arg("-p")
                .arg(&dir.0)
                .arg("-e")
                .arg(&log)
                .arg("-c")
                .arg(&conf);
        };
        let mut check = Command::new(bin);
        check.arg("-t");
        args(&mut check);
        let mut run = Command::new(bin);
        args(&mut run);
        let addr = format!("127.0.0.1:{https}").parse().unwrap();
        Proxy::start("nginx", check, run, dir, log, addr)
    }

    fn haproxy(bin: &Path, upstream: SocketAddr) -> Proxy {
        let dir = TempDir::new();
        let (http, https) = (free_port("127.0.0.1"), free_port("127.0.0.1"));
        let conf = dir.0.join("haproxy.cfg");
        std::fs::write(&conf, substituted_haproxy(upstream, http, https)).unwrap();
        let log = dir.0.join("haproxy.log");
        let mut check = Command::new(bin);
        check.arg("-c").arg("-f").arg(&conf);
        let mut run = Command::new(bin);
        // -db: in the foreground; its own messages go to stderr, kept in the log file.
        run.arg("-db").arg("-f").arg(&conf);
        let addr = format!("127.0.0.1:{https}").parse().unwrap();
        Proxy::start("haproxy", check, run, dir, log, addr)
    }

    fn start(
        name: &str,
        mut check: Command,
        mut run: Command,
        dir: TempDir,
        log: PathBuf,
        addr: SocketAddr,
    ) -> Proxy {
        let checked = check.output().expect("check the configuration");
        assert!(
            checked.status.success(),
            "{name} refuses its configuration: {}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        let child = run
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.0.join("stderr")).unwrap())
            .spawn()
            .expect("start the proxy");
        // Built first, so that a failure below stops the proxy and shows its messages.
        let mut proxy = Proxy {
            child,
            dir,
            log,
            addr,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            let exited = proxy.child.try_wait().unwrap();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "{name} did not start ({exited:?})"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        proxy
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            for file in [self.log.clone(), self.dir.0.join("stderr")] {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                eprintln!("{}:\n{text}", file.display());
            }
        }
    }
}

/// `contrib/haproxy.cfg` with only its addresses, ports and TLS replaced: the consoled server
/// line, the two `bind` lines, and the redirect to https (without TLS it would send everything
/// away).
fn substituted_haproxy(upstream: SocketAddr, http: u16, https: u16) -> String {
    let mut out = String::new();
    for line in HAPROXY_CFG.lines() {
        let t = line.trim();
        let replaced = if t.starts_with("server consoled1 127.0.0.1:8080 ") {
            Some(t.replace("127.0.0.1:8080", &upstream.to_string()))
        } else if t == "bind :80" {
            Some(format!("bind 127.0.0.1:{http}"))
        } else if t.starts_with("bind :443 ssl ") {
            Some(format!("bind 127.0.0.1:{https}"))
        } else if t.starts_with("http-request redirect scheme https ") || t.starts_with("ssl-") {
            Some(String::new())
        } else if t.starts_with("log /dev/log") {
            // No syslog socket in a test: no log lines, the proxy otherwise as shipped.
            Some(String::new())
        } else {
            None
        };
        match replaced {
            Some(r) => out.push_str(&format!("    {r}\n")),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for must in ["127.0.0.1:8080 ", "bind :443", "redirect scheme https"] {
        assert!(!out.contains(must), "the substitution missed {must:?}");
    }
    out
}

/// Starts consoled with the client-address settings of `contrib/consoled.env` (the header
/// given) and the scenario's limits, then the proxy in front, then runs the scenario with
/// browsers at `{net}.2` to `{net}.5`.
fn counted_by_own_address(
    proxy_name: &str,
    start: fn(&Path, SocketAddr) -> Proxy,
    header: &str,
    net: &str,
) {
    let Some(bin) = find(proxy_name) else {
        println!(
            "SKIPPED: {proxy_name} is not installed (as root, `make test` installs Debian's \
             {proxy_name} through scripts/proxy-deps.sh; or apt-get install {proxy_name})"
        );
        return;
    };
    let trusted = env_setting("CONSOLED_TRUSTED_PROXIES");
    let mut settings = vec![
        ("CONSOLED_CLIENT_IP_HEADER", header),
        ("CONSOLED_TRUSTED_PROXIES", trusted.as_str()),
    ];
    settings.extend(browsers::LIMITS);
    let server = common::binary::Spawned::start(env!("CARGO_BIN_EXE_consoled"), &settings);
    let proxy = start(&bin, server.addr);
    browsers::each_browser_is_counted_by_its_own_address(server.addr, proxy.addr, net);
    // What the counters say stays internal: the proxy never forwards /metrics to consoled.
    let r = common::raw_request(proxy.addr, "GET", "/metrics", &[], b"");
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        !body.contains("consoled_"),
        "{proxy_name} forwarded /metrics"
    );
}

/// As `contrib/consoled.env` ships it: `X-Real-IP`.
#[test]
fn behind_the_shipped_nginx_each_browser_is_counted_by_its_own_address() {
    let header = env_setting("CONSOLED_CLIENT_IP_HEADER");
    counted_by_own_address("nginx", Proxy::nginx, &header, "127.0.0");
}

/// The other shape `contrib/nginx.conf` supports: consoled's default header, `X-Forwarded-For`.
#[test]
fn behind_the_shipped_nginx_with_x_forwarded_for_each_browser_is_counted_too() {
    counted_by_own_address("nginx", Proxy::nginx, "X-Forwarded-For", "127.0.1");
}

#[test]
fn behind_the_shipped_haproxy_each_browser_is_counted_by_its_own_address() {
    let header = env_setting("CONSOLED_CLIENT_IP_HEADER");
    counted_by_own_address("haproxy", Proxy::haproxy, &header, "127.0.2");
}

#[test]
fn behind_the_shipped_haproxy_with_x_forwarded_for_each_browser_is_counted_too() {
    counted_by_own_address("haproxy", Proxy::haproxy, "X-Forwarded-For", "127.0.3");
}
