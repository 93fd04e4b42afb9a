//! The cluster a run uses: a database of its own on the server of `DATABASE_URL` (dropped at the
//! end), two `consoled` processes on fixed ports (so that one can be replaced on its port, as in
//! a rolling restart), and Debian's HAProxy running the shipped `contrib/haproxy.cfg` in front of
//! them (the file tests/proxy.rs runs, substituted the same way: addresses, ports, no TLS).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A database of its own for one run, dropped with it.
pub struct Database {
    admin: String,
    pub name: String,
    pub url: String,
}

impl Database {
    pub fn create(admin: &str, label: &str) -> Database {
        let name = format!("consoled_resume_{}_{label}", std::process::id());
        let mut c = postgres::Client::connect(admin, postgres::NoTls).expect("DATABASE_URL");
        c.batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create the run's database");
        let (path, query) = admin.split_once('?').unwrap_or((admin, ""));
        let (base, _) = path
            .rsplit_once('/')
            .expect("a database name in DATABASE_URL");
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        Database {
            admin: admin.to_string(),
            url: format!("{base}/{name}{query}"),
            name,
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One `consoled serve` on a fixed port.
pub struct Instance {
    child: Child,
    pub addr: SocketAddr,
}

impl Instance {
    pub fn start(bin: &str, database_url: &str, port: u16, log: &PathBuf) -> Instance {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("the instance's log file");
        let child = Command::new(bin)
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("CONSOLED_LISTEN", addr.to_string())
            .env("CONSOLED_BASE_URL", format!("http://{addr}"))
            // HAProxy connects from 127.0.0.1 and names the client in X-Real-IP
            // (contrib/haproxy.cfg's matching settings).
            .env("CONSOLED_TRUSTED_PROXIES", "127.0.0.1")
            .env("CONSOLED_CLIENT_IP_HEADER", "X-Real-IP")
            .env("CONSOLED_COOKIE_SECURE", "false")
            .env("CONSOLED_MAIL_SENDER", "false")
            .env(
                "CONSOLED_MAIL_DIR",
                std::env::temp_dir().join("consoled-bench-mail"),
            )
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {bin}: {e}"));
        let instance = Instance { child, addr };
        instance.wait_ready();
        instance
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while get(self.addr, "/readyz") != Some(200) {
            assert!(
                Instant::now() < deadline,
                "consoled on {} did not start",
                self.addr
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then the exit (at most 20 s).
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status of a plain `GET`, if anything answered.
fn get(addr: SocketAddr, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// HAProxy running the substituted shipped file, in the foreground.
pub struct Haproxy {
    child: Child,
    pub addr: SocketAddr,
    admin: PathBuf,
    _dir: crate::tempdir::TempDir,
}

impl Haproxy {
    pub fn start(upstreams: &[SocketAddr]) -> Haproxy {
        let bin = crate::proxies::find("haproxy").expect("HAProxy (scripts/cluster-deps.sh)");
        let dir = crate::tempdir::TempDir::new();
        let (http, https) = (free_port(), free_port());
        let cfg = dir.0.join("haproxy.cfg");
        let admin = dir.0.join("admin.sock");
        let text = crate::proxies::substituted_haproxy(upstreams, http, https, &admin);
        std::fs::write(&cfg, text).unwrap();
        let child = Command::new(bin)
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.0.join("stderr")).unwrap())
            .spawn()
            .expect("start haproxy");
        let addr: SocketAddr = format!("127.0.0.1:{https}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "haproxy did not start");
            thread::sleep(Duration::from_millis(50));
        }
        Haproxy {
            child,
            addr,
            admin,
            _dir: dir,
        }
    }

    /// Sets the state of server `consoled{n}` through the runtime API (`maint`: no new
    /// connections; `ready`: back, once its health checks pass).
    pub fn set_state(&self, n: usize, state: &str) {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&self.admin).expect("the runtime API");
        writeln!(s, "set server consoled/consoled{n} state {state}").unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.trim().is_empty(), "haproxy: {answer}");
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
