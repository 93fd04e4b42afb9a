//! The two servers under test, each a separate process on a free loopback port with the same
//! database, killed when the tool is done with it (also on panic).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Consoled,
    /// consoled without the hub's writes for idle streams: every change goes through the
    /// stream's own thread, the pure thread-per-connection design.
    ConsoledIndirect,
    AsyncRef,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Consoled => "consoled",
            Kind::ConsoledIndirect => "consoled (CONSOLED_STREAM_DIRECT=false)",
            Kind::AsyncRef => "async-ref",
        }
    }

    /// The order of the table's columns.
    pub fn rank(name: &str) -> usize {
        [Kind::Consoled, Kind::ConsoledIndirect, Kind::AsyncRef]
            .iter()
            .position(|k| k.name() == name)
            .unwrap_or(3)
    }
}

pub struct Server {
    pub kind: Kind,
    pub addr: SocketAddr,
    child: Child,
}

/// Caps consoled would otherwise apply by configuration: set above anything this machine can
/// hold, so that what stops it is the machine or the limits consoled derives itself.
const UNBOUNDED: &str = "1000000";

impl Server {
    pub fn start(kind: Kind, bin: &str, database_url: &str) -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let listen = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(bin);
        cmd.env("DATABASE_URL", database_url)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        match kind {
            Kind::Consoled | Kind::ConsoledIndirect => {
                cmd.arg("serve")
                    .env("CONSOLED_LISTEN", &listen)
                    .env("CONSOLED_COOKIE_SECURE", "false")
                    .env(
                        "CONSOLED_MAIL_DIR",
                        std::env::temp_dir().join("consoled-bench-mail"),
                    )
                    .env("RUST_LOG", "warn")
                    // One token opens every stream: the per-token limit is not what is measured.
                    .env("CONSOLED_MAX_STREAMS_PER_PRINCIPAL", UNBOUNDED)
                    .env("CONSOLED_MAX_STREAMS_PER_INSTANCE", UNBOUNDED)
                    .env("CONSOLED_MAX_CONNECTIONS", UNBOUNDED);
            }
            Kind::AsyncRef => {
                cmd.env("ASYNC_REF_LISTEN", &listen);
            }
        }
        // The caller's own settings win (e.g. `CONSOLED_MAX_STREAMS_PER_INSTANCE=… make bench-compare`),
        // except the address the tool picked.
        let own = match kind {
            Kind::Consoled | Kind::ConsoledIndirect => "CONSOLED_",
            Kind::AsyncRef => "ASYNC_REF_",
        };
        for (k, v) in std::env::vars() {
            if k.starts_with(own) && !k.ends_with("_LISTEN") {
                cmd.env(k, v);
            }
        }
        // The mode is what this column is about: never the caller's.
        match kind {
            Kind::Consoled => {
                cmd.env("CONSOLED_STREAM_DIRECT", "true");
            }
            Kind::ConsoledIndirect => {
                cmd.env("CONSOLED_STREAM_DIRECT", "false");
            }
            Kind::AsyncRef => {}
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {bin}: {e} (make bench-compare builds it)"));
        let mut server = Server {
            kind,
            addr: listen.parse().expect("address"),
            child,
        };
        // Serving, not only listening: consoled binds its port before it migrates and starts
        // its threads, and a connection made meanwhile waits in the kernel's queue. A storm sent
        // then measured the start-up (a second after a large instance was killed), not the
        // opening of streams on a running instance.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !server.serving() {
            if let Some(status) = server.exited() {
                panic!("{} exited at start: {status}", kind.name());
            }
            assert!(Instant::now() < deadline, "{} did not start", kind.name());
            thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// Whether the server answers: consoled's `/readyz` is 200; the reference answers anything.
    fn serving(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(self.addr) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let asked =
            s.write_all(b"GET /readyz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n");
        let mut head = [0u8; 12];
        if asked.is_err() || s.read_exact(&mut head).is_err() || !head.starts_with(b"HTTP/1.") {
            return false;
        }
        match self.kind {
            Kind::Consoled | Kind::ConsoledIndirect => &head[9..12] == b"200",
            Kind::AsyncRef => true,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the process ended, if it did.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Applies consoled's migrations with its own binary (both servers read its tables).
pub fn migrate(consoled_bin: &str, database_url: &str) {
    let status = Command::new(consoled_bin)
        .arg("migrate")
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .status()
        .expect("run consoled migrate");
    assert!(status.success(), "consoled migrate failed: {status}");
}
