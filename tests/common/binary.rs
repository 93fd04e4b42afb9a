//! The real `consoled` binary as `make run` starts it, on a free port, with its log (stderr)
//! captured line by line so that a test can wait for a line, such as a mailed link.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::tempdir::TempDir;

/// What the server says when its port is taken.
const PORT_TAKEN: &str = "Address already in use";

pub struct Spawned {
    child: Child,
    pub addr: SocketAddr,
    pub url: String,
    pub mail_dir: TempDir,
    log: Arc<Mutex<Vec<String>>>,
}

impl Spawned {
    /// `make run`'s settings (demo on, plain-http cookies, mail to files with each link logged,
    /// the sender on) on a free port of this test binary's database, plus `extra`.
    ///
    /// A free port can be taken between our look and the server's bind, by another test's
    /// server or as the local port of an outgoing connection (the same range): the server then
    /// says so and exits, and it is started again on another port.
    pub fn start(bin: &str, extra: &[(&str, &str)]) -> Spawned {
        let mut attempt = 1;
        loop {
            let mut spawned = Spawned::launch(bin, super::webdriver::free_port(), extra);
            match spawned.healthy() {
                Ok(()) => return spawned,
                Err(log) if attempt < 5 && log.iter().any(|l| l.contains(PORT_TAKEN)) => {
                    attempt += 1
                }
                Err(log) => panic!("consoled did not start: {log:?}"),
            }
        }
    }

    /// Like `start`, on a given port (an instance replaced behind a load balancer).
    pub fn start_on(bin: &str, port: u16, extra: &[(&str, &str)]) -> Spawned {
        let mut spawned = Spawned::launch(bin, port, extra);
        if let Err(log) = spawned.healthy() {
            panic!("consoled did not start: {log:?}");
        }
        spawned
    }

    /// Starts the binary on `port`, without waiting for it.
    fn launch(bin: &str, port: u16, extra: &[(&str, &str)]) -> Spawned {
        let url = format!("http://127.0.0.1:{port}");
        let mail_dir = TempDir::new();
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .env("DATABASE_URL", super::database_url())
            .env("CONSOLED_LISTEN", format!("127.0.0.1:{port}"))
            .env("CONSOLED_BASE_URL", &url)
            .env("CONSOLED_DEMO", "true")
            .env("CONSOLED_COOKIE_SECURE", "false")
            .env("CONSOLED_MAIL_DIR", &mail_dir.0)
            .env("CONSOLED_MAIL_LOG_LINKS", "true")
            .env("CONSOLED_MAIL_SENDER", "true")
            .env("CONSOLED_HASH_THREADS", "1")
            .env_remove("CONSOLED_SMTP_URL")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start the consoled binary");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Spawned {
            child,
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            url,
            mail_dir,
            log,
        }
    }

    /// Waits up to 30 s for the server to answer `/healthz`; its log if it does not, or if it
    /// ended first.
    fn healthy(&mut self) -> Result<(), Vec<String>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        // Our child's socket, not another test's server that took the port first.
        while !super::listens_on(self.child.id(), self.addr.port())
            || std::net::TcpStream::connect(self.addr).is_err()
            || super::raw_request(self.addr, "GET", "/healthz", &[], b"").status != 200
        {
            if let Ok(Some(_)) = self.child.try_wait() {
                // Let the log's reader take its last lines.
                std::thread::sleep(Duration::from_millis(100));
                return Err(self.log());
            }
            if Instant::now() >= deadline {
                return Err(self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log lines so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The first log line containing every one of `parts`, waiting up to `limit` for it.
    #[track_caller]
    pub fn wait_log(&self, parts: &[&str], limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let found = self
                .log()
                .into_iter()
                .find(|l| parts.iter().all(|p| l.contains(p)));
            if let Some(line) = found {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {parts:?} within {limit:?}; the log: {:#?}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The link logged for a mail to `to` that leads to `page` (`verify-email`,
    /// `reset-password`), as `make run` prints it.
    #[track_caller]
    pub fn mailed_link(&self, to: &str, page: &str) -> String {
        let line = self.wait_log(
            &[
                "mailed link",
                &format!("to={to}:"),
                &format!("/{page}?token="),
            ],
            Duration::from_secs(20),
        );
        line.rsplit(' ').next().unwrap().to_string()
    }
}

impl Spawned {
    /// `kill -9`: the process dies without any clean-up.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (a rolling restart), then waits up to `limit` for the exit; whether it exited 0.
    pub fn terminate(&mut self, limit: Duration) -> bool {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                if !status.success() {
                    eprintln!("consoled on {} ended with {status}", self.addr);
                }
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
