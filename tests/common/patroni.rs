//! A private Patroni cluster for a test: one etcd member and two Patroni nodes (Debian's
//! `etcd-server` and `patroni`), each node managing its own PostgreSQL in a temporary folder, on
//! free loopback ports, in synchronous mode. As root everything runs as `postgres` (PostgreSQL
//! refuses root). Stopped and removed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::webdriver::free_port;

pub struct Patroni {
    dir: PathBuf,
    etcd: Child,
    nodes: Vec<Child>,
    /// PostgreSQL's port of each node.
    pub pg_ports: Vec<u16>,
    /// Patroni's REST API port of each node.
    pub api_ports: Vec<u16>,
    bin: PathBuf,
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// `program` as `postgres` when we are root; setpriv execs it, so the child's id is the
/// program's own (a signal reaches it, not a wrapper).
fn as_postgres(program: &str) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            program,
        ]);
        c
    } else {
        Command::new(program)
    }
}

/// Installs Patroni and etcd when missing (as root); `Err` says why there are none.
pub fn available() -> Result<(), String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ha-deps.sh");
    let out = Command::new(script)
        .output()
        .map_err(|e| format!("{script}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// GET of Patroni's REST API: status and body, or `None` while nothing listens.
pub fn api(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let r = super::read_response(&mut std::io::BufReader::new(s));
    Some((r.status, String::from_utf8_lossy(&r.body).into_owned()))
}

impl Patroni {
    /// Starts etcd and both nodes and waits until the first leads and the second is its
    /// synchronous standby.
    pub fn start() -> Patroni {
        let dir = std::env::temp_dir().join(format!("consoled-patroni-{}", super::unique()));
        std::fs::create_dir_all(&dir).unwrap();
        super::pgcluster::give_to_owner(&dir);
        let _ = Command::new("chmod").arg("0755").arg(&dir).status();
        let bin = super::pgcluster::bin_dir().expect("PostgreSQL binaries");
        let (client, peer) = (free_port(), free_port());
        let etcd = as_postgres("etcd")
            .args(["--name", "e1", "--data-dir"])
            .arg(dir.join("etcd"))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=e1=http://127.0.0.1:{peer}"))
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        let mut patroni = Patroni {
            dir,
            etcd,
            nodes: Vec::new(),
            pg_ports: vec![free_port(), free_port()],
            api_ports: vec![free_port(), free_port()],
            bin,
        };
        for i in 0..2 {
            let config = patroni.config(i, client);
            let file = patroni.dir.join(format!("n{i}.yml"));
            std::fs::write(&file, config).unwrap();
            let log = std::fs::File::create(patroni.dir.join(format!("n{i}.log"))).unwrap();
            super::pgcluster::give_to_owner(&patroni.dir);
            let child = as_postgres("patroni")
                .arg(&file)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start patroni");
            patroni.nodes.push(child);
            let role = if i == 0 {
                "\"leader\""
            } else {
                "\"sync_standby\""
            };
            patroni.wait_cluster(&[role, "\"running\""], Duration::from_secs(60));
        }
        patroni
    }

    fn config(&self, i: usize, etcd_port: u16) -> String {
        let (pg, api) = (self.pg_ports[i], self.api_ports[i]);
        let dir = self.dir.display();
        let bin = self.bin.display();
        format!(
            "scope: consoled-test\nname: n{i}\n\
             restapi:\n  listen: 127.0.0.1:{api}\n  connect_address: 127.0.0.1:{api}\n\
             etcd3:\n  hosts: 127.0.0.1:{etcd_port}\n\
             bootstrap:\n  dcs:\n    ttl: 10\n    loop_wait: 1\n    retry_timeout: 5\n\
             \x20   synchronous_mode: true\n    postgresql:\n      parameters:\n\
             \x20       fsync: 'off'\n        wal_keep_size: 128MB\n\
             \x20 initdb:\n    - encoding: UTF8\n    - no-locale\n    - auth: trust\n\
             postgresql:\n  listen: 127.0.0.1:{pg}\n  connect_address: 127.0.0.1:{pg}\n\
             \x20 data_dir: {dir}/data{i}\n  bin_dir: {bin}\n  pgpass: {dir}/pgpass{i}\n\
             \x20 parameters:\n    unix_socket_directories: {dir}\n\
             \x20 pg_hba:\n    - local all all trust\n    - host all all 127.0.0.1/32 trust\n\
             \x20   - host replication all 127.0.0.1/32 trust\n\
             \x20 authentication:\n    superuser:\n      username: postgres\n\
             \x20   replication:\n      username: postgres\n"
        )
    }

    /// Waits until `/cluster` of the first node's API contains every one of `parts`.
    pub fn wait_cluster(&self, parts: &[&str], limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let state = api(self.api_ports[0], "/cluster")
                .map(|(_, b)| b)
                .unwrap_or_default();
            if parts.iter().all(|p| state.contains(p)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Patroni never showed {parts:?}: {state}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Both nodes' logs.
    pub fn log(&self) -> String {
        (0..2)
            .map(|i| {
                std::fs::read_to_string(self.dir.join(format!("n{i}.log"))).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Runs `sql` with psql as the superuser on node `i`.
    pub fn psql(&self, i: usize, db: &str, sql: &str) -> String {
        let out = as_postgres(&self.bin.join("psql").display().to_string())
            .args(["-h", "127.0.0.1", "-p", &self.pg_ports[i].to_string()])
            .args([
                "-U",
                "postgres",
                "-d",
                db,
                "-v",
                "ON_ERROR_STOP=1",
                "-AXtqc",
                sql,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `POST /switchover` from node `from` to node `to` on the leader's API; its answer.
    pub fn switchover(&self, from: usize, to: usize) -> String {
        let body = format!("{{\"leader\": \"n{from}\", \"candidate\": \"n{to}\"}}");
        let r = super::raw_request(
            format!("127.0.0.1:{}", self.api_ports[from])
                .parse()
                .unwrap(),
            "POST",
            "/switchover",
            &[("Content-Type".into(), "application/json".into())],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        String::from_utf8_lossy(&r.body).into_owned()
    }
}

impl Drop for Patroni {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = Command::new("kill")
                .args(["-TERM", &node.id().to_string()])
                .status();
        }
        for node in &mut self.nodes {
            let deadline = Instant::now() + Duration::from_secs(15);
            while node.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = node.kill();
            let _ = node.wait();
        }
        // A PostgreSQL that Patroni left running (it stops the ones it manages on a clean exit).
        for i in 0..2 {
            let _ = as_postgres(&self.bin.join("pg_ctl").display().to_string())
                .arg("-D")
                .arg(self.dir.join(format!("data{i}")))
                .args(["-m", "immediate", "stop"])
                .output();
        }
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
