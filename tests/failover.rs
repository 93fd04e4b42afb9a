//! A primary failover under traffic (issue 33), with a real streaming standby: a private
//! primary, a standby made with `pg_basebackup` and replicating synchronously, consoled on a
//! multi-host connection string with `target_session_attrs=read-write`, and sign-ups, sign-ins,
//! session checks and event streams running while the standby is promoted. Twice: the old
//! primary stopped right after the promotion, and the old primary fenced read-only
//! (`default_transaction_read_only`) and left up for 5 s. In both: no 500 (503 with
//! `Retry-After`, during the switch only), the first sign-up succeeds within 5 s of the
//! promotion, every stream gets `resync` or ends and then sees a change made on the new primary,
//! no acknowledged sign-up is lost, and every mail queued for one is written at least once
//! (duplicates counted). Skipped, saying why, where no cluster can be made.

mod common;

use std::time::Duration;

use common::binary::Spawned;
use common::pgcluster::Pg;
use common::traffic::{Switch, Traffic};
use common::{Client, PASSWORD};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_consoled");

/// A primary and its synchronous standby, both running, with the consoled database.
fn pair() -> Result<(Pg, Pg), String> {
    let primary = Pg::init(
        "wal_level = replica\nmax_wal_senders = 10\nhot_standby = on\nwal_keep_size = 256MB",
        "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust",
    )?;
    primary.start();
    primary.psql("postgres", "CREATE DATABASE consoled");
    let standby = Pg::standby_of(&primary, "standby1");
    standby.start();
    primary.wait_for(
        "postgres",
        "SELECT state FROM pg_stat_replication WHERE application_name = 'standby1'",
        "streaming",
        Duration::from_secs(20),
    );
    // Synchronous from now on: a commit is acknowledged once the standby has it.
    primary.psql(
        "postgres",
        "ALTER SYSTEM SET synchronous_standby_names = 'standby1'",
    );
    primary.psql("postgres", "SELECT pg_reload_conf()");
    primary.wait_for(
        "postgres",
        "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'",
        "sync",
        Duration::from_secs(20),
    );
    Ok((primary, standby))
}

enum OldPrimary {
    /// Stopped right after the promotion.
    Stopped,
    /// Fenced read-only before the promotion and left up this long after it.
    ReadOnlyFor(Duration),
}

fn failover(url_of: impl Fn(&Pg, &Pg) -> String, old: OldPrimary) {
    let (primary, standby) = match pair() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED: no private PostgreSQL primary and standby here: {why}");
            return;
        }
    };
    let url = url_of(&primary, &standby);
    // Each client its own address (X-Forwarded-For), so that no per-address limit is reached.
    let server = Spawned::start(
        BIN,
        &[
            ("DATABASE_URL", url.as_str()),
            ("CONSOLED_TRUSTED_PROXIES", "127.0.0.1"),
        ],
    );
    let traffic = Traffic::start(server.addr);
    std::thread::sleep(Duration::from_secs(2));

    let switch = traffic.now();
    if let OldPrimary::ReadOnlyFor(_) = old {
        primary.psql(
            "postgres",
            "ALTER SYSTEM SET default_transaction_read_only = on",
        );
        primary.psql("postgres", "SELECT pg_reload_conf()");
        // Transactions begun before the fence end before the standby is promoted.
        std::thread::sleep(Duration::from_millis(300));
    }
    standby.promote();
    let promoted = traffic.now();
    if let OldPrimary::ReadOnlyFor(up) = old {
        std::thread::sleep(up);
    }
    primary.stop("fast");
    let last_event = traffic.now();
    std::thread::sleep(Duration::from_secs(6));
    let switch = Switch {
        began: switch,
        promoted,
        last_event,
    };
    traffic.finish_and_check(
        &switch,
        &|sql| standby.psql("consoled", sql),
        &server.mail_dir.0,
    );
}

fn url_form(primary: &Pg, standby: &Pg) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/consoled?target_session_attrs=read-write",
        primary.port, standby.port
    )
}

fn key_value_form(primary: &Pg, standby: &Pg) -> String {
    format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=consoled \
         target_session_attrs=read-write",
        primary.port, standby.port
    )
}

#[test]
fn failover_with_the_old_primary_stopped_at_once() {
    failover(url_form, OldPrimary::Stopped);
}

#[test]
fn failover_with_the_old_primary_read_only_for_five_seconds() {
    failover(
        key_value_form,
        OldPrimary::ReadOnlyFor(Duration::from_secs(5)),
    );
}

#[test]
fn a_server_turned_read_only_answers_503_and_its_connections_leave_the_pool() {
    let primary = match Pg::init("", "host all all 127.0.0.1/32 trust") {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED: no private PostgreSQL cluster here: {why}");
            return;
        }
    };
    primary.start();
    primary.psql("postgres", "CREATE DATABASE consoled");
    let url = format!("postgres://postgres@127.0.0.1:{}/consoled", primary.port);
    let server = Spawned::start(
        BIN,
        &[
            ("DATABASE_URL", url.as_str()),
            ("CONSOLED_DB_TIMEOUT_SECONDS", "1"),
        ],
    );
    let mut c = Client::new(server.addr);
    c.signup();
    // Fenced: the pooled connections were writable and are not any more.
    primary.psql(
        "postgres",
        "ALTER SYSTEM SET default_transaction_read_only = on",
    );
    primary.psql("postgres", "SELECT pg_reload_conf()");
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let r = Client::new(server.addr).post(
            "/auth/signup",
            &json!({"email": common::unique_email(), "password": PASSWORD, "name": "R"}),
        );
        r.expect_error(503, "unavailable");
        assert!(r.header("retry-after").is_some());
    }
    // Writable again: served at once, on connections made anew.
    primary.psql(
        "postgres",
        "ALTER SYSTEM RESET default_transaction_read_only",
    );
    primary.psql("postgres", "SELECT pg_reload_conf()");
    std::thread::sleep(Duration::from_millis(300));
    let mut c = Client::new(server.addr);
    c.signup();
    c.get("/auth/session").expect(200);
}
