//! TLS to PostgreSQL (issue 33): a private cluster with `ssl = on`, a certificate from a CA this
//! test makes (with the `openssl` command), and a pg_hba.conf that admits only `hostssl`. The
//! real binary connects with each `sslmode` and the start-up failures are named and exit 78:
//! a server without TLS while TLS is required, an unknown CA, a name mismatch, a connection
//! without TLS where only TLS is admitted. Every connection of a serving instance (pool,
//! listener, mail sender) is encrypted. Skipped, saying why, where no cluster can be made.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::binary::Spawned;
use common::pgcluster::{give_to_owner, Pg};

const BIN: &str = env!("CARGO_BIN_EXE_consoled");

/// The CA, a second CA that signed nothing the server has, and the server's and a client's
/// certificates, in `dir`.
struct Pki {
    dir: PathBuf,
}

fn openssl(dir: &Path, args: &str) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("openssl {args}"))
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    fn make(dir: &Path) -> Pki {
        let key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
        for ca in ["ca", "other-ca"] {
            openssl(
                dir,
                &format!("req -x509 {key} -keyout {ca}.key -out {ca}.crt -days 2 -subj /CN={ca}"),
            );
        }
        // An extension each, which makes the certificate X.509 v3 (rustls refuses v1).
        let leaf = |name: &str, cn: &str, ext: &str| {
            openssl(
                dir,
                &format!("req {key} -keyout {name}.key -out {name}.csr -subj /CN={cn}"),
            );
            std::fs::write(dir.join(format!("{name}.ext")), format!("{ext}\n")).unwrap();
            openssl(
                dir,
                &format!(
                    "x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
                     -out {name}.crt -days 2 -extfile {name}.ext"
                ),
            );
        };
        leaf(
            "server",
            "localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        );
        leaf("client", "certuser", "extendedKeyUsage=clientAuth");
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }
}

/// A cluster with TLS on that admits only `hostssl` (and, for `certuser`, only with a client
/// certificate), with the consoled database; its PKI.
fn tls_cluster() -> Result<(Pg, Pki), String> {
    Command::new("openssl")
        .arg("version")
        .output()
        .map_err(|e| format!("the openssl command is not installed: {e}"))?;
    let pg = Pg::init(
        "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n\
         ssl_ca_file = 'ca.crt'\n",
        "hostssl all certuser 127.0.0.1/32 cert\nhostssl all all 127.0.0.1/32 trust",
    )?;
    let pki = Pki::make(&pg.data());
    std::fs::set_permissions(
        pg.data().join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    give_to_owner(&pg.dir);
    // The test's own files are read by consoled, which runs as this process's user.
    pg.start();
    pg.psql("postgres", "CREATE DATABASE consoled");
    pg.psql("postgres", "CREATE ROLE certuser LOGIN SUPERUSER");
    Ok((pg, pki))
}

fn migrate(url: &str, extra: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("migrate")
        .env("DATABASE_URL", url)
        .env("CONSOLED_DB_TIMEOUT_SECONDS", "2")
        .env_remove("RUST_LOG");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[track_caller]
fn refused(url: &str, extra: &[(&str, &str)], parts: &[&str]) {
    let started = std::time::Instant::now();
    let out = migrate(url, extra);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(78), "{url}: {err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{url} was retried: {err}"
    );
    for part in parts {
        assert!(err.contains(part), "{url}: no {part:?} in {err}");
    }
}

#[track_caller]
fn accepted(url: &str, extra: &[(&str, &str)]) {
    let out = migrate(url, extra);
    assert!(out.status.success(), "{url}: {}", stderr(&out));
}

#[test]
fn every_sslmode_against_a_server_that_admits_only_tls() {
    let (pg, pki) = match tls_cluster() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIPPED: no private PostgreSQL cluster with TLS here: {why}");
            return;
        }
    };
    let (ca, other) = (pki.path("ca.crt"), pki.path("other-ca.crt"));
    let port = pg.port;
    let url =
        |host: &str, query: &str| format!("postgres://postgres@{host}:{port}/consoled?{query}");

    // Accepted: the default (prefer) and require take any certificate; verify-ca and
    // verify-full check it against our CA, by file or as the system's store.
    accepted(&url("127.0.0.1", ""), &[]);
    accepted(&url("127.0.0.1", "sslmode=require"), &[]);
    accepted(
        &url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        &[],
    );
    accepted(
        &url(
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        &[],
    );
    let kv = format!(
        "host=wrong-name.example hostaddr=127.0.0.1 port={port} user=postgres dbname=consoled \
         sslmode=verify-ca sslrootcert='{ca}'"
    );
    accepted(&kv, &[]);
    accepted(
        &url("localhost", "sslmode=verify-full&sslrootcert=system"),
        &[("SSL_CERT_FILE", ca.as_str())],
    );
    // A client certificate, for a role pg_hba.conf admits only with one.
    let client = format!(
        "sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
        pki.path("client.crt"),
        pki.path("client.key")
    );
    accepted(
        &format!("postgres://certuser@localhost:{port}/consoled?{client}"),
        &[],
    );

    // Refused at once with exit 78, each saying what is wrong.
    refused(
        &url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={other}"),
        ),
        &[],
        &["not signed by a CA in sslrootcert"],
    );
    refused(
        &url("localhost", &format!("sslmode=require&sslrootcert={other}")),
        &[],
        &["not signed by a CA in sslrootcert"],
    );
    refused(
        &kv.replace("verify-ca", "verify-full"),
        &[],
        &["not issued for the host name", "wrong-name.example"],
    );
    refused(
        &url("127.0.0.1", "sslmode=disable"),
        &[],
        &[
            "refused a connection without TLS",
            "hostssl",
            "sslmode=disable",
        ],
    );
    refused(
        &format!(
            "postgres://certuser@localhost:{port}/consoled?sslmode=verify-full&sslrootcert={ca}"
        ),
        &[],
        &["certificate"],
    );
    refused(
        &url("localhost", "sslmode=verify-full"),
        &[],
        &["DATABASE_URL", "sslmode=verify-full needs sslrootcert"],
    );
    refused(
        &url(
            "localhost",
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
        ),
        &[],
        &["sslrootcert /nonexistent/ca.crt"],
    );

    // The shared test cluster has no TLS: require is refused, prefer falls back to plain text.
    let plain = common::database_url();
    refused(
        &format!("{plain}?sslmode=require"),
        &[],
        &["does not offer TLS", "sslmode=require"],
    );
    accepted(&plain, &[]);
}

#[test]
fn every_connection_of_a_serving_instance_is_encrypted() {
    let (pg, pki) = match tls_cluster() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIPPED: no private PostgreSQL cluster with TLS here: {why}");
            return;
        }
    };
    let url = format!(
        "postgres://postgres@localhost:{}/consoled?sslmode=verify-full&sslrootcert={}",
        pg.port,
        pki.path("ca.crt")
    );
    let server = Spawned::start(BIN, &[("DATABASE_URL", url.as_str())]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while common::raw_request(server.addr, "GET", "/readyz", &[], b"").status != 200 {
        assert!(std::time::Instant::now() < deadline, "never ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut c = common::Client::new(server.addr);
    c.signup();
    let rows = pg.psql(
        "postgres",
        "SELECT a.application_name || ':' || s.ssl FROM pg_stat_activity a \
         JOIN pg_stat_ssl s USING (pid) WHERE a.application_name LIKE 'consoled%' ORDER BY 1",
    );
    let rows: Vec<&str> = rows.lines().collect();
    for kind in ["consoled:", "consoled-listener-", "consoled-mail:"] {
        assert!(
            rows.iter().any(|r| r.starts_with(kind)),
            "no {kind} in {rows:?}"
        );
    }
    assert!(rows.iter().all(|r| r.ends_with(":true")), "{rows:?}");
}
