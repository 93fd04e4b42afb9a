//! Private PostgreSQL clusters a test makes for itself (TLS on, a streaming standby), beside the
//! shared one of `make test`: initdb into a temporary folder, a free loopback port, and stopped
//! and removed on drop. As root the cluster belongs to, and runs as, `postgres` (initdb refuses
//! root), as scripts/pg.sh does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct Pg {
    pub dir: PathBuf,
    pub port: u16,
    bin: PathBuf,
}

/// The folder of PostgreSQL's server binaries, or why there is none.
pub fn bin_dir() -> Result<PathBuf, String> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("/usr/lib/postgresql: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("pg_ctl").exists())
        .collect();
    dirs.sort();
    dirs.pop()
        .ok_or_else(|| "no PostgreSQL server binaries under /usr/lib/postgresql".into())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// `program args` as the cluster's owner.
fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn check(what: &str, out: std::io::Result<Output>) -> Result<String, String> {
    let out = out.map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{what}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Makes `path` the owner's (as root) so the server can read what the test wrote there.
pub fn give_to_owner(path: &Path) {
    if is_root() {
        let _ = Command::new("chown")
            .arg("-R")
            .arg("postgres")
            .arg(path)
            .status();
    }
}

impl Pg {
    /// A new cluster (not started) with `conf` appended to postgresql.conf and `hba` as the
    /// whole pg_hba.conf (a `local` line for the test's own psql is added). `Err`: why the
    /// machine cannot run one.
    pub fn init(conf: &str, hba: &str) -> Result<Pg, String> {
        let bin = bin_dir()?;
        let dir = std::env::temp_dir().join(format!("consoled-pg-{}", super::unique()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        // The server must reach its folder.
        let _ = Command::new("chmod").arg("0755").arg(&dir).status();
        give_to_owner(&dir);
        let data = dir.join("data");
        check(
            "initdb",
            as_owner(&bin.join("initdb"))
                .arg("-D")
                .arg(&data)
                .args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-locale",
                ])
                .arg("--no-sync")
                .output(),
        )?;
        let pg = Pg {
            dir,
            port: super::webdriver::free_port(),
            bin,
        };
        pg.configure(conf);
        let hba = format!("local all all trust\nlocal replication all trust\n{hba}\n");
        std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
        give_to_owner(&pg.dir);
        Ok(pg)
    }

    fn configure(&self, conf: &str) {
        let base = format!(
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n\
             max_connections = 200\nfsync = off\nfull_page_writes = off\n\
             log_min_messages = warning\n{conf}\n",
            self.port,
            self.dir.display()
        );
        let file = self.data().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str(&base);
        std::fs::write(&file, text).unwrap();
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn start(&self) {
        let log = self.dir.join("server.log");
        check(
            "pg_ctl start",
            as_owner(&self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "start"])
                .output(),
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", self.log()));
    }

    /// `pg_ctl stop -m MODE` (`fast`: sessions ended, a clean shutdown).
    pub fn stop(&self, mode: &str) {
        let _ = as_owner(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["-m", mode, "-w", "stop"])
            .output();
    }

    pub fn promote(&self) {
        check(
            "pg_ctl promote",
            as_owner(&self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.data())
                .args(["-w", "promote"])
                .output(),
        )
        .unwrap();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Runs `sql` as the superuser over the Unix socket; its output, unaligned.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        check(
            "psql",
            as_owner(&self.bin.join("psql"))
                .arg("-h")
                .arg(&self.dir)
                .args(["-p", &self.port.to_string(), "-U", "postgres", "-d", db])
                .args(["-v", "ON_ERROR_STOP=1", "-AXtqc", sql])
                .output(),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .to_string()
    }

    /// A streaming standby of `primary`, made with pg_basebackup (and `-R`: it follows the
    /// primary once started), named `name` for synchronous replication.
    pub fn standby_of(primary: &Pg, name: &str) -> Pg {
        let dir = std::env::temp_dir().join(format!("consoled-pg-{}", super::unique()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = Command::new("chmod").arg("0755").arg(&dir).status();
        give_to_owner(&dir);
        let standby = Pg {
            dir,
            port: super::webdriver::free_port(),
            bin: primary.bin.clone(),
        };
        check(
            "pg_basebackup",
            as_owner(&primary.bin.join("pg_basebackup"))
                .arg("-D")
                .arg(standby.data())
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &primary.port.to_string(),
                    "-U",
                    "postgres",
                ])
                .args(["-X", "stream", "-R", "--no-sync", "-c", "fast"])
                .output(),
        )
        .unwrap();
        standby.configure("");
        // Its name in the primary's synchronous_standby_names: after -R's line, which it
        // replaces (the later line of postgresql.auto.conf wins).
        let auto = standby.data().join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&auto).unwrap();
        text.push_str(&format!(
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={name}'\n",
            primary.port
        ));
        std::fs::write(&auto, text).unwrap();
        give_to_owner(&standby.dir);
        standby
    }

    /// Waits until `sql` (as the superuser, in database `db`) prints `want`.
    pub fn wait_for(&self, db: &str, sql: &str, want: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if self.psql(db, sql) == want {
                return;
            }
            assert!(Instant::now() < deadline, "{sql} never gave {want}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.stop("immediate");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
