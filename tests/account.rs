//! The signed-in user's own account (issue 32, item 4): name and locale, and the export of
//! everything consoled holds about the user (never a secret or hash). Deletion:
//! tests/account_deletion.rs; the address change: tests/email_change.rs.

mod common;

use std::time::Duration;

use common::account::{cli, send_json, stream_of};
use common::sse::Ev;
use common::*;
use serde_json::json;

const T: Duration = Duration::from_secs(5);

#[test]
fn name_and_locale_change_are_checked_and_announced() {
    let server = TestServer::start();
    let mut c = server.client();
    let (_, state) = c.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    assert_eq!(state["user"]["locale"], "en");
    let mut stream = stream_of(&server, &c);

    let r = send_json(
        &mut c,
        "PATCH",
        "/auth/account",
        &json!({"name": "  Ada L.  ", "locale": "de"}),
    );
    r.expect(200);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.json()["user"]["name"], "Ada L.");
    assert_eq!(r.json()["user"]["locale"], "de");
    let session = c.get("/auth/session").json();
    assert_eq!(session["user"]["locale"], "de");
    // The signup's own announcements may reach the stream after it opened: skipped.
    let change = loop {
        match stream.next_event(T) {
            Ev::Change(v) if v["type"] == "user" && v["op"] != "insert" => break v,
            Ev::Change(_) => continue,
            other => panic!("expected the user's change, got {other:?}"),
        }
    };
    assert_eq!(
        change,
        json!({"type": "user", "id": id, "op": "update", "project_id": null, "org_id": null})
    );

    // One field alone, and nothing at all, are fine; the other stays.
    let r = send_json(&mut c, "PATCH", "/auth/account", &json!({"locale": "ja"}));
    assert_eq!(r.json()["user"]["name"], "Ada L.");
    send_json(&mut c, "PATCH", "/auth/account", &json!({})).expect(200);
    for (body, field) in [
        (json!({"locale": "xx"}), "locale"),
        (json!({"locale": "EN"}), "locale"),
        (json!({"locale": 7}), "locale"),
        (json!({"name": ""}), "name"),
        (json!({"name": "a".repeat(101)}), "name"),
        (json!({"name": "tab\there"}), "name"),
    ] {
        let r = send_json(&mut c, "PATCH", "/auth/account", &body);
        r.expect_error(400, "invalid_input");
        assert_eq!(r.json()["error"]["details"]["field"], field, "{body}");
    }
    let r = send_json(&mut c, "PATCH", "/auth/account", &json!({"locale": "xx"}));
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("de, en, es, fr, it, ja, nl, pl, pt, zh"),
        "{message}"
    );
    let r = c.send(
        "PATCH",
        "/auth/account",
        &[("Content-Type", "application/json")],
        b"{}",
    );
    r.expect_error(403, "csrf_invalid");
    let mut stranger = server.client();
    send_json(
        &mut stranger,
        "PATCH",
        "/auth/account",
        &json!({"name": "X"}),
    )
    .expect_error(401, "unauthorized");
    c.get("/auth/account")
        .expect_error(405, "method_not_allowed");
}

/// The export names what is held (sessions, devices, links, codes, tokens, mails, limits) and
/// carries none of the secrets themselves: no password hash, TOTP secret, recovery code, session,
/// device or API token, CSRF token.
#[test]
fn the_export_holds_everything_about_the_user_and_no_secret() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, state) = c.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    let project = project_of(&state);
    let setup = c.post("/auth/mfa/totp/setup", &json!({}));
    let secret_b32 = setup.json()["secret"].as_str().unwrap().to_string();
    let secret = consoled::crypto::base32_decode(&secret_b32).unwrap();
    let code = consoled::crypto::totp_code(&secret, consoled::crypto::unix_now() / 30);
    let enabled = c.post("/auth/mfa/totp/enable", &json!({ "code": code }));
    enabled.expect(200);
    let codes: Vec<String> = enabled.json()["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().replace('-', ""))
        .collect();
    let made = cli(&[
        "token",
        "create",
        "--project",
        &project.to_string(),
        "--name",
        "ci",
    ]);
    db().execute(
        "UPDATE api_tokens SET created_by = $2 WHERE id = $1",
        &[&made["id"].as_i64().unwrap(), &id],
    )
    .unwrap();
    let mut other = server.client();
    other
        .login(&email, "a wrong password")
        .expect_error(401, "invalid_credentials");
    let device = other.login(&email, PASSWORD);
    device.expect(200);
    // Invitations: one the user made in a team of its own, one to the user's address.
    let team = c.post("/v1/organizations", &json!({"name": "Exported team"}));
    team.expect(201);
    let invitee = unique_email();
    let invite = json!({"email": invitee, "role": "viewer"});
    c.post(
        &format!("/v1/organizations/{}/invitations", team.json()["id"]),
        &invite,
    )
    .expect(201);
    let mut inviter = server.client();
    let (_, inviter_state) = inviter.signup();
    let inviter_team = inviter.post("/v1/organizations", &json!({"name": "Inviting team"}));
    inviter_team.expect(201);
    let to_me = json!({"email": email, "role": "member"});
    let path = format!(
        "/v1/organizations/{}/invitations",
        inviter_team.json()["id"]
    );
    inviter.post(&path, &to_me).expect(201);

    let r = c.get("/auth/account/export");
    r.expect(200);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(
        r.header("content-disposition"),
        Some(format!("attachment; filename=\"consoled-account-{id}.json\"").as_str())
    );
    let export = r.json();
    let user = &export["user"];
    assert_eq!(user["id"], id);
    assert_eq!(user["email"], email);
    assert_eq!(user["mfa_enabled"], true);
    assert_eq!(user["has_password"], true);
    assert!(user["disabled_at"].is_null());
    assert!(export["exported_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(export["organizations"][0]["kind"], "personal");
    assert_eq!(export["organizations"][0]["role"], "owner");
    assert_eq!(export["projects"][0]["id"], project);
    // Two sign-ins: the signup's session (its second factor turned on since) and the pending one.
    assert_eq!(export["sessions"].as_array().unwrap().len(), 2, "{export}");
    assert_eq!(export["devices"].as_array().unwrap().len(), 1, "{export}");
    assert_eq!(export["recovery_codes"].as_array().unwrap().len(), 10);
    assert_eq!(export["api_tokens"][0]["name"], "ci");
    assert_eq!(export["api_tokens"][0]["scope"], "read_write");
    assert!(export["api_tokens"][0]["expires_at"].is_null());
    // TOTP enabled while the address was unproven (issue 37's flag).
    assert_eq!(user["mfa_enabled_unproven"], true);
    assert_eq!(export["invitations_sent"][0]["email"], invitee);
    assert_eq!(export["invitations_sent"][0]["role"], "viewer");
    let received = &export["invitations_received"][0];
    assert_eq!(received["org_id"], inviter_team.json()["id"]);
    assert_eq!(received["invited_by"], inviter_state["user"]["id"]);
    assert!(received["accepted_at"].is_null());
    let mails: Vec<&str> = export["queued_mails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert!(
        mails.contains(&"verify_email") && mails.contains(&"mfa_enabled"),
        "{mails:?}"
    );
    let limits: Vec<&str> = export["rate_limit_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(limits.contains(&"login-account"), "{limits:?}");
    assert_eq!(export["open_streams"], 0);

    let text = String::from_utf8(r.body.clone()).unwrap();
    let hash: String = db()
        .query_one("SELECT password_hash FROM users WHERE id = $1", &[&id])
        .unwrap()
        .get(0);
    let mut secrets = vec![
        hash,
        secret_b32,
        c.cookies["svc_session"].clone(),
        c.cookies["svc_csrf"].clone(),
        other.cookies["svc_session"].clone(),
        other.cookies["svc_device"].clone(),
        made["token"].as_str().unwrap().to_string(),
    ];
    secrets.extend(codes);
    for secret in &secrets {
        assert!(
            !text.to_lowercase().contains(&secret.to_lowercase()),
            "a secret in the export: {secret}"
        );
    }
    for word in ["hash", "secret\"", "token\""] {
        assert!(!text.contains(word), "{word} in {text}");
    }
    c.post_empty("/auth/logout").expect(204);
    c.get("/auth/account/export")
        .expect_error(401, "unauthorized");
}

/// Every table with a column referring to a user is read by the export (or the new table's data
/// would be missing from it).
#[test]
fn the_export_reads_every_table_that_refers_to_a_user() {
    // A server migrates this binary's database, which may be fresh when this test runs first.
    let _server = TestServer::start();
    let rows = db()
        .query(
            "SELECT DISTINCT c.conrelid::regclass::text FROM pg_constraint c
              WHERE c.contype = 'f' AND c.confrelid = 'users'::regclass",
            &[],
        )
        .unwrap();
    let referring: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert!(referring.len() >= 8, "{referring:?}");
    for table in &referring {
        assert!(
            consoled::db::export::TABLES.contains(&table.as_str()),
            "{table} refers to users but the export does not read it (src/db/export.rs)"
        );
    }
}
