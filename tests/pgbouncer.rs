//! consoled behind Debian's PgBouncer 1.18 in transaction mode (issue 24): the pool goes through
//! PgBouncer with `CONSOLED_DB_KEEP_STATEMENTS=false` (PgBouncer < 1.21 cannot carry named
//! statements), while `LISTEN`, migrations and the workers use `CONSOLED_DATABASE_DIRECT_URL`.
//! Sign-up, sign-in, a stream and a change on it all work. PgBouncer is installed by
//! scripts/cluster-deps.sh (as root); the test is skipped, saying why, when it cannot be.

mod common;

use std::time::Duration;

use common::binary::Spawned;
use common::sse::{self, Ev};
use common::*;

pub mod bouncer {
    //! A private PgBouncer on a free loopback port, in front of the test cluster.
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    pub struct PgBouncer {
        child: Child,
        pub port: u16,
        dir: std::path::PathBuf,
    }

    /// Installs PgBouncer when missing; `Err` says why there is none.
    pub fn available() -> Result<(), String> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cluster-deps.sh");
        let out = Command::new(script)
            .output()
            .map_err(|e| format!("{script}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    impl PgBouncer {
        /// Transaction pooling to `target` (host:port), `pool_size` server connections.
        pub fn start(target: &str, pool_size: u32) -> PgBouncer {
            let (host, pg_port) = target.rsplit_once(':').unwrap();
            let port = super::common::webdriver::free_port();
            let dir = std::env::temp_dir().join(format!("consoled-pgbouncer-{port}"));
            std::fs::create_dir_all(&dir).unwrap();
            let ini = format!(
                "[databases]\n* = host={host} port={pg_port}\n\n[pgbouncer]\n\
                 listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                 auth_type = trust\nauth_file = {dir}/userlist.txt\npool_mode = transaction\n\
                 default_pool_size = {pool_size}\nmax_client_conn = 1000\n\
                 ignore_startup_parameters = options,extra_float_digits\n\
                 logfile = {dir}/pgbouncer.log\n",
                dir = dir.display()
            );
            std::fs::write(dir.join("pgbouncer.ini"), ini).unwrap();
            std::fs::write(dir.join("userlist.txt"), "\"postgres\" \"\"\n").unwrap();
            let _ = Command::new("chmod")
                .args(["-R", "a+rwX"])
                .arg(&dir)
                .status();
            let ini = dir.join("pgbouncer.ini");
            // PgBouncer refuses to run as root.
            let mut cmd = if unsafe_is_root() {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--", "pgbouncer"]).arg(&ini);
                c
            } else {
                let mut c = Command::new("pgbouncer");
                c.arg(&ini);
                c
            };
            let child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start pgbouncer");
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "pgbouncer did not start");
                std::thread::sleep(Duration::from_millis(50));
            }
            PgBouncer { child, port, dir }
        }

        pub fn log(&self) -> String {
            std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
        }
    }

    fn unsafe_is_root() -> bool {
        Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
    }

    impl Drop for PgBouncer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[test]
fn sign_in_and_a_stream_change_through_a_transaction_mode_pgbouncer() {
    if let Err(why) = bouncer::available() {
        eprintln!("SKIPPED: PgBouncer cannot be installed here: {why}");
        return;
    }
    let bouncer = bouncer::PgBouncer::start(&db_target(), 2);
    let pooled = database_url_via(bouncer.port);
    let direct = database_url();
    let server = Spawned::start(
        env!("CARGO_BIN_EXE_consoled"),
        &[
            ("DATABASE_URL", pooled.as_str()),
            ("CONSOLED_DATABASE_DIRECT_URL", direct.as_str()),
            ("CONSOLED_DB_KEEP_STATEMENTS", "false"),
            ("CONSOLED_DB_POOL", "6"),
        ],
    );
    // Sign-up, log out, sign in again: sessions, rate limits, the CSRF cookie, all pooled.
    let mut c = Client::new(server.addr);
    let (email, state) = c.signup();
    let org = state["organizations"][0]["id"].as_i64().unwrap();
    c.post_empty("/auth/logout").expect(204);
    c.login(&email, PASSWORD).expect(200);
    c.get("/auth/session").expect(200);
    // A stream (opened through the pool) and a change announced in a transaction: the listener,
    // on the direct connection, delivers it.
    let cookie = format!("svc_session={}", c.cookies["svc_session"]);
    let mut streams: Vec<sse::Sse> = (0..3)
        .map(|_| {
            let mut s = sse::open(server.addr, &[("Cookie", &cookie)]);
            assert_eq!(s.status, 200, "{}", String::from_utf8_lossy(&s.body));
            assert_eq!(s.next(Duration::from_secs(5)), Ev::Ready);
            s
        })
        .collect();
    let mut pg = postgres::Client::connect(&pooled, postgres::NoTls).unwrap();
    pg.simple_query(&format!(
        "SELECT consoled_notify_change('server', 4242, 'update', NULL, {org})"
    ))
    .unwrap();
    for s in &mut streams {
        let v = s.change(Duration::from_secs(5));
        assert_eq!(v["id"], 4242, "{v}");
    }
    // Many requests at once: the pool's six connections share PgBouncer's two server
    // connections, so a statement kept on one would be missing on the other.
    let addr = server.addr;
    let failures: usize = (0..8)
        .map(|_| {
            let cookie = cookie.clone();
            std::thread::spawn(move || {
                (0..25)
                    .filter(|_| {
                        let headers = [("Cookie".to_string(), cookie.clone())];
                        let r = raw_request(addr, "GET", "/auth/session", &headers, b"");
                        r.status != 200
                    })
                    .count()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .sum();
    assert_eq!(
        failures,
        0,
        "of 200 concurrent requests; the log: {:#?}",
        server.log()
    );
    let log = bouncer.log();
    assert!(
        !log.contains("prepared statement"),
        "PgBouncer reports prepared statement trouble: {log}"
    );
}
