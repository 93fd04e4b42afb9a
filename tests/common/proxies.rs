//! Debian's nginx and HAProxy running the shipped examples (`contrib/nginx.conf`,
//! `contrib/haproxy.cfg`) as shipped, only their addresses, ports and TLS replaced, in the
//! foreground with every file in a directory of their own (`tests/proxy.rs`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::tempdir::TempDir;

pub const NGINX_CONF: &str = include_str!("../../contrib/nginx.conf");
const HAPROXY_CFG: &str = include_str!("../../contrib/haproxy.cfg");

/// Where `contrib/nginx.conf` sends its example sibling service.
const SIBLING: &str = "server 127.0.0.1:8090;";

/// An address and free port on `ip`.
pub fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
}

/// The proxy's binary, where Debian (or a local build) puts it.
pub fn find(name: &str) -> Option<PathBuf> {
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
pub struct Proxy {
    child: Child,
    dir: TempDir,
    log: PathBuf,
    pub addr: SocketAddr,
}

impl Proxy {
    pub fn nginx(bin: &Path, upstream: SocketAddr) -> Proxy {
        Proxy::nginx_with(bin, upstream, None)
    }

    /// nginx, with the example sibling service at `sibling` (else where the file says).
    pub fn nginx_with(bin: &Path, upstream: SocketAddr, sibling: Option<SocketAddr>) -> Proxy {
        let dir = TempDir::new();
        let (http, https) = (free_port("127.0.0.1"), free_port("127.0.0.1"));
        let v6 = TcpListener::bind("[::1]:0")
            .ok()
            .map(|_| (free_port("::1"), free_port("::1")));
        let site = dir.0.join("consoled.conf");
        let mut conf = substituted_conf(upstream, http, https, v6);
        if let Some(sibling) = sibling {
            assert!(
                conf.contains(SIBLING),
                "contrib/nginx.conf has no {SIBLING:?}"
            );
            conf = conf.replace(SIBLING, &format!("server {sibling};"));
        }
        std::fs::write(&site, conf).unwrap();
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

    pub fn haproxy(bin: &Path, upstream: SocketAddr) -> Proxy {
        Proxy::haproxy_for(bin, &[upstream], None)
    }

    /// HAProxy in front of one or two instances (the file's `consoled1` and its commented
    /// `consoled2`), with the console front end at `console` (else where the file says).
    pub fn haproxy_for(bin: &Path, upstreams: &[SocketAddr], console: Option<SocketAddr>) -> Proxy {
        let dir = TempDir::new();
        let (http, https) = (free_port("127.0.0.1"), free_port("127.0.0.1"));
        let conf = dir.0.join("haproxy.cfg");
        let admin = dir.0.join("admin.sock");
        let mut text = substituted_haproxy(upstreams, http, https, &admin);
        if let Some(console) = console {
            let web = "server web 127.0.0.1:8090";
            assert!(text.contains(web), "contrib/haproxy.cfg has no {web:?}");
            text = text.replace(web, &format!("server web {console}"));
        }
        std::fs::write(&conf, text).unwrap();
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

impl Proxy {
    /// HAProxy's runtime API: sets the state of server `name` of backend `consoled` (`maint`:
    /// out of the rotation; `ready`: back once its health checks pass).
    pub fn set_server_state(&self, name: &str, state: &str) {
        let answer = self.runtime(&format!("set server consoled/{name} state {state}"));
        assert!(answer.trim().is_empty(), "haproxy: {answer}");
    }

    /// Waits (at most `limit`) until HAProxy's health checks have found every server of
    /// backend `consoled` up.
    pub fn wait_all_up(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            // `show stat`: CSV, the proxy's name first, the server's second, its status 18th.
            let stat = self.runtime("show stat");
            let servers: Vec<&str> = stat
                .lines()
                .filter(|l| l.starts_with("consoled,") && !l.starts_with("consoled,BACKEND"))
                .map(|l| l.split(',').nth(17).unwrap_or(""))
                .collect();
            if !servers.is_empty() && servers.iter().all(|s| *s == "UP") {
                return;
            }
            assert!(Instant::now() < deadline, "haproxy's servers: {servers:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn runtime(&self, command: &str) -> String {
        use std::io::{Read, Write};
        let socket = self.dir.0.join("admin.sock");
        let mut s = std::os::unix::net::UnixStream::connect(&socket).expect("the runtime API");
        writeln!(s, "{command}").unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer
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
/// lines (the second one, commented in the file, taken in when there are two upstreams), the
/// two `bind` lines, the redirect to https (without TLS it would send everything away), and the
/// runtime API's socket (`admin`).
pub fn substituted_haproxy(
    upstreams: &[SocketAddr],
    http: u16,
    https: u16,
    admin: &Path,
) -> String {
    let mut out = String::new();
    for line in HAPROXY_CFG.lines() {
        let t = line.trim();
        let replaced = if t.starts_with("server consoled1 127.0.0.1:8080 ") {
            Some(t.replace("127.0.0.1:8080", &upstreams[0].to_string()))
        } else if let (Some(rest), Some(second)) = (
            t.strip_prefix("# server consoled2 127.0.0.1:8081 "),
            upstreams.get(1),
        ) {
            Some(format!("server consoled2 {second} {rest}"))
        } else if let Some(rest) = t.strip_prefix("stats socket /run/haproxy/admin.sock ") {
            Some(format!("stats socket {} {rest}", admin.display()))
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
    for must in [
        "127.0.0.1:8080 ",
        "bind :443",
        "redirect scheme https",
        "/run/haproxy",
    ] {
        assert!(!out.contains(must), "the substitution missed {must:?}");
    }
    assert!(
        upstreams.len() < 2 || out.contains("\n    server consoled2 "),
        "contrib/haproxy.cfg has no commented `server consoled2 127.0.0.1:8081` line"
    );
    out
}
