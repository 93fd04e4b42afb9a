//! Sealed TOTP secrets (issue 25, item 4): with CONSOLED_DATA_KEY a dump of the database holds no
//! readable secret and sign-in with a code still works; a sealed secret opens only for its user;
//! secrets stored before sealing are sealed at the next start; `consoled keys rotate` re-seals
//! under a new key; a lost key leaves recovery codes and `consoled mfa reset`; without a key the
//! server warns at start.
//!
//! A server started with a key seals every unsealed secret in the database, other tests' too, so
//! the tests of this file take turns (`SERIAL`) and use only the keys below.

mod common;

use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::binary::Spawned;
use common::*;
use consoled::config::keys::{parse, KeySettings};
use consoled::crypto::{base32_decode, base32_encode, totp_code, unix_now};
use consoled::keys::DataKeys;
use serde_json::{json, Value};

static SERIAL: Mutex<()> = Mutex::new(());

const KEY_A: &str = "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=";
const KEY_B: &str = "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=";
const KEY_C: &str = "Q0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0M=";

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn keys(current: &str) -> DataKeys {
    DataKeys::from_settings(&KeySettings {
        data: Some(parse("test", current).unwrap()),
        ..Default::default()
    })
}

struct Enrolled {
    email: String,
    user_id: i64,
    secret: Vec<u8>,
    recovery: Vec<String>,
}

/// Signs up on `c` and enables the second factor with the current step's code; `sealed`: the
/// server has a data key, so not even the offered secret may be readable.
fn enroll(c: &mut Client, sealed: bool) -> Enrolled {
    let (email, state) = c.signup();
    let r = c.post("/auth/mfa/totp/setup", &json!({}));
    r.expect(200);
    let secret = base32_decode(r.json()["secret"].as_str().unwrap()).unwrap();
    let user_id = state["user"]["id"].as_i64().unwrap();
    if sealed {
        assert_readable_nowhere(&secret);
    }
    let code = totp_code(&secret, unix_now() / 30);
    let r = c.post("/auth/mfa/totp/enable", &json!({ "code": code }));
    r.expect(200);
    let recovery = r.json()["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    Enrolled {
        email,
        user_id,
        secret,
        recovery,
    }
}

/// The table `users` as `COPY` (what pg_dump writes) prints it.
fn dump_users() -> String {
    let mut out = String::new();
    std::io::Read::read_to_string(
        &mut db().copy_out("COPY users TO STDOUT").unwrap(),
        &mut out,
    )
    .unwrap();
    out
}

/// Neither the secret's bytes (hex, as COPY prints bytea) nor its base32 form is in the dump.
#[track_caller]
fn assert_readable_nowhere(secret: &[u8]) {
    let dump = dump_users().to_lowercase();
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    assert!(!dump.contains(&hex), "the raw secret is in the dump");
    let b32 = base32_encode(secret).to_lowercase();
    assert!(!dump.contains(&b32), "the base32 secret is in the dump");
}

fn stored(user_id: i64) -> Vec<u8> {
    db().query_one("SELECT totp_secret FROM users WHERE id = $1", &[&user_id])
        .unwrap()
        .get(0)
}

/// Signs in with the password and then `code`; the answer to the code.
fn sign_in(server: &TestServer, email: &str, code: &str) -> Response {
    let mut c = server.client();
    let r = c.login(email, PASSWORD);
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], true);
    c.post("/auth/mfa/totp", &json!({ "code": code }))
}

/// A code of the next step (the current one was consumed by enabling or by an earlier test
/// step); the server accepts ±1 step.
fn next_code(secret: &[u8], after: u64) -> String {
    totp_code(secret, after.max(unix_now() / 30) + 1)
}

fn cli(args: &[&str], env: &[(&str, &str)]) -> (bool, Value, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_consoled"));
    cmd.args(args)
        .env("DATABASE_URL", database_url())
        .env_remove("CONSOLED_DATA_KEY")
        .env_remove("CONSOLED_DATA_KEY_OLD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (
        out.status.success(),
        json,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn with_a_data_key_a_dump_holds_no_readable_secret_and_sign_in_still_works() {
    let _turn = serial();
    let server = TestServer::with(&[("CONSOLED_DATA_KEY", KEY_A)]);
    let mut c = server.client();
    let me = enroll(&mut c, true);
    assert_readable_nowhere(&me.secret);
    let sealed = stored(me.user_id);
    assert_eq!((sealed.len(), sealed[0]), (53, 1), "version 1, 53 bytes");
    assert!(keys(KEY_A).is_current(&sealed));
    let r = sign_in(&server, &me.email, &next_code(&me.secret, 0));
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], false);
}

#[test]
fn a_sealed_secret_copied_to_another_user_does_not_open() {
    let _turn = serial();
    let server = TestServer::with(&[("CONSOLED_DATA_KEY", KEY_A)]);
    let victim = enroll(&mut server.client(), true);
    let (thief, state) = server.client().signup();
    let thief_id = state["user"]["id"].as_i64().unwrap();
    db().execute(
        "UPDATE users SET totp_secret = (SELECT totp_secret FROM users WHERE id = $1)
          WHERE id = $2",
        &[&victim.user_id, &thief_id],
    )
    .unwrap();
    let r = sign_in(&server, &thief, &next_code(&victim.secret, 0));
    r.expect_error(503, "unavailable");
    // The forged row would fail the other tests' rotation.
    db().execute(
        "UPDATE users SET totp_secret = NULL WHERE id = $1",
        &[&thief_id],
    )
    .unwrap();
}

#[test]
fn secrets_stored_before_sealing_are_sealed_at_the_next_start_and_keep_working() {
    let _turn = serial();
    let plain = TestServer::start();
    let me = enroll(&mut plain.client(), false);
    assert_eq!(
        stored(me.user_id),
        me.secret,
        "without a key: stored as it is"
    );
    drop(plain);
    let server = TestServer::with(&[("CONSOLED_DATA_KEY", KEY_A)]);
    assert!(keys(KEY_A).is_current(&stored(me.user_id)));
    assert_readable_nowhere(&me.secret);
    sign_in(&server, &me.email, &next_code(&me.secret, 0)).expect(200);
}

#[test]
fn keys_rotate_reseals_under_the_new_key_and_a_lost_key_leaves_recovery_codes() {
    let _turn = serial();
    let server = TestServer::with(&[("CONSOLED_DATA_KEY", KEY_A)]);
    let me = enroll(&mut server.client(), true);
    drop(server);
    let (ok, out, err) = cli(
        &["keys", "rotate"],
        &[
            ("CONSOLED_DATA_KEY", KEY_B),
            ("CONSOLED_DATA_KEY_OLD", KEY_A),
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(out["key_id"], keys(KEY_B).current_id().unwrap());
    assert!(out["resealed"].as_u64().unwrap() >= 1, "{out}");
    assert!(keys(KEY_B).is_current(&stored(me.user_id)));
    let (ok, out, _) = cli(
        &["keys", "rotate"],
        &[
            ("CONSOLED_DATA_KEY", KEY_B),
            ("CONSOLED_DATA_KEY_OLD", KEY_A),
        ],
    );
    assert!(ok && out["resealed"] == 0, "{out}");
    // The new key alone opens it.
    let server = TestServer::with(&[("CONSOLED_DATA_KEY", KEY_B)]);
    sign_in(&server, &me.email, &next_code(&me.secret, 0)).expect(200);
    drop(server);

    // A key that opens none of them: rotate refuses, naming the setting and the user.
    let (ok, _, err) = cli(&["keys", "rotate"], &[("CONSOLED_DATA_KEY", KEY_C)]);
    assert!(!ok);
    assert!(err.contains("CONSOLED_DATA_KEY_OLD"), "{err}");
    assert!(err.contains(&format!("user {}", me.user_id)), "{err}");
    // Serving with the lost key: a code cannot be checked (503, not a wrong code), a recovery
    // code still signs in, and the operator resets the factor.
    let server = TestServer::with(&[("CONSOLED_DATA_KEY", KEY_C)]);
    let r = sign_in(&server, &me.email, &next_code(&me.secret, 1));
    r.expect_error(503, "unavailable");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("recovery code"));
    let mut c = server.client();
    c.login(&me.email, PASSWORD).expect(200);
    c.post("/auth/mfa/totp", &json!({ "code": me.recovery[0] }))
        .expect(200);
    let (ok, out, err) = cli(&["mfa", "reset", "--email", &me.email], &[]);
    assert!(ok, "{err}");
    assert_eq!(out["mfa_enabled"], false);
    assert!(out["sessions_ended"].as_u64().unwrap() >= 1);
    c.get("/auth/session").expect_error(401, "unauthorized");
    let r = server.client().login(&me.email, PASSWORD);
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], false, "enrols again from here");
    let (ok, _, err) = cli(&["mfa", "reset", "--email", "nobody@example.com"], &[]);
    assert!(!ok && err.contains("no account"), "{err}");
}

#[test]
fn without_a_data_key_the_server_warns_at_start() {
    let _turn = serial();
    let server = Spawned::start(env!("CARGO_BIN_EXE_consoled"), &[]);
    server.wait_log(
        &["WARN", "CONSOLED_DATA_KEY is not set"],
        Duration::from_secs(10),
    );
    drop(server);
    let server = Spawned::start(
        env!("CARGO_BIN_EXE_consoled"),
        &[("CONSOLED_DATA_KEY", KEY_A)],
    );
    server.wait_log(&["data key", "sealed"], Duration::from_secs(10));
    assert!(!server
        .log()
        .iter()
        .any(|l| l.contains("CONSOLED_DATA_KEY is not set")));
    drop(server);
    // Sealed secrets and no key: the operator is told what it costs.
    let sealing = TestServer::with(&[("CONSOLED_DATA_KEY", KEY_A)]);
    enroll(&mut sealing.client(), true);
    drop(sealing);
    let server = Spawned::start(env!("CARGO_BIN_EXE_consoled"), &[]);
    server.wait_log(
        &[
            "ERROR",
            "sealed but CONSOLED_DATA_KEY is not set",
            "recovery code",
        ],
        Duration::from_secs(10),
    );
}
