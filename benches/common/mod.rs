//! What the load tools share: a `consoled` server process on a free loopback port, killed when
//! the tool ends (also when it panics).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

/// The CSRF key of every server a bench starts (CONSOLED_CSRF_KEY), so that a bench can sign its
/// own pre-session CSRF token (`CSRF_KEY`, the same 32 bytes).
pub const CSRF_KEY_B64: &str = "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=";
#[allow(dead_code)] // streams.rs posts nothing
pub const CSRF_KEY: [u8; 32] = [b'B'; 32];

pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// Starts `target/release/consoled` (or `CONSOLED_BIN`) with `env` on top of the bench
    /// defaults and waits until it accepts connections.
    pub fn start(database_url: &str, env: &[(&str, String)]) -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let exe =
            std::env::var("CONSOLED_BIN").unwrap_or_else(|_| "target/release/consoled".into());
        let mut cmd = Command::new(exe);
        cmd.env("DATABASE_URL", database_url)
            .env("CONSOLED_LISTEN", format!("127.0.0.1:{port}"))
            .env("CONSOLED_COOKIE_SECURE", "false")
            .env("CONSOLED_CSRF_KEY", CSRF_KEY_B64)
            .env(
                "CONSOLED_MAIL_DIR",
                std::env::temp_dir().join("consoled-bench-mail"),
            )
            .env("RUST_LOG", "warn");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .expect("start target/release/consoled (make bench builds it)");
        let server = Server {
            child,
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(server.addr).is_err() {
            assert!(Instant::now() < deadline, "server did not start");
            thread::sleep(Duration::from_millis(100));
        }
        server
    }

    #[allow(dead_code)] // checks.rs reads no figures of the process
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
