//! The signed-in user's own account (issue 32, item 4): name and locale, the export of everything
//! consoled holds about the user (never a secret or hash), and deletion (proof of presence; what
//! goes with the account and what stays; a team the user alone owns blocks it, 409). A plain SQL
//! delete of a user follows the same rules. (The address change: tests/email_change.rs.)

mod common;

use std::time::Duration;

use common::account::{cli, send_json};
use common::sse::{self, Ev, Sse};
use common::*;
use serde_json::json;

const T: Duration = Duration::from_secs(5);

#[track_caller]
fn ready(mut s: Sse) -> Sse {
    assert_eq!(s.status, 200, "{}", String::from_utf8_lossy(&s.body));
    assert_eq!(s.next(T), Ev::Ready);
    s
}

fn stream_of(server: &TestServer, c: &Client) -> Sse {
    let cookie = format!("svc_session={}", c.cookies["svc_session"]);
    ready(sse::open(server.addr, &[("Cookie", &cookie)]))
}

fn count(sql: &str, id: i64) -> i64 {
    db().query_one(sql, &[&id]).unwrap().get(0)
}

/// Makes the user's sessions look `secs` old: older than the re-authentication window, a
/// deletion then needs the password.
fn age_sessions(user_id: i64, secs: f64) {
    db().execute(
        "UPDATE sessions SET created_at = now() - make_interval(secs => $2) WHERE user_id = $1",
        &[&user_id, &secs],
    )
    .unwrap();
}

/// A team organization with these (user, role) members; its id.
fn team(name: &str, members: &[(i64, &str)]) -> i64 {
    let mut c = db();
    let org: i64 = c
        .query_one(
            "INSERT INTO organizations (name, kind) VALUES ($1, 'team') RETURNING id",
            &[&name],
        )
        .unwrap()
        .get(0);
    for (user, role) in members {
        c.execute(
            "INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, $3)",
            &[&org, user, role],
        )
        .unwrap();
    }
    org
}

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
    let change = loop {
        match stream.next_event(T) {
            Ev::Change(v) if v["type"] == "user" => break v,
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

/// Deleting the account: the password or a recent sign-in; then the sessions and their streams,
/// devices, links, memberships, the tokens the user made and the personal organization with its
/// projects and their tokens go; the team the user belonged to stays; the address is told and
/// may sign up again.
#[test]
fn deleting_the_account_needs_proof_and_takes_what_is_the_users() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, state) = c.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    let personal = state["organizations"][0]["id"].as_i64().unwrap();
    let project = project_of(&state);
    let mut owner = server.client();
    let (_, owner_state) = owner.signup();
    let owner_id = owner_state["user"]["id"].as_i64().unwrap();
    let acme = team("Acme", &[(owner_id, "owner"), (id, "member")]);
    let acme_project: i64 = db()
        .query_one(
            "INSERT INTO projects (org_id, name) VALUES ($1, 'web') RETURNING id",
            &[&acme],
        )
        .unwrap()
        .get(0);
    let made = cli(&["token", "create", "--project", &acme_project.to_string()]);
    db().execute(
        "UPDATE api_tokens SET created_by = $2 WHERE id = $1",
        &[&made["id"].as_i64().unwrap(), &id],
    )
    .unwrap();
    let kept = cli(&["token", "create", "--project", &acme_project.to_string()]);
    let personal_token = cli(&["token", "create", "--project", &project.to_string()]);
    let mut streams = vec![stream_of(&server, &c), stream_of(&server, &c)];
    for t in [&made, &personal_token] {
        let bearer = format!("Bearer {}", t["token"].as_str().unwrap());
        streams.push(ready(sse::open(server.addr, &[("Authorization", &bearer)])));
    }
    let kept_bearer = format!("Bearer {}", kept["token"].as_str().unwrap());
    let mut kept_stream = ready(sse::open(server.addr, &[("Authorization", &kept_bearer)]));

    age_sessions(id, 301.0);
    send_json(&mut c, "DELETE", "/auth/account", &json!({})).expect_error(403, "reauth_required");
    send_json(
        &mut c,
        "DELETE",
        "/auth/account",
        &json!({"password": "not it"}),
    )
    .expect_error(403, "reauth_required");
    for bad in [json!({"password": 7}), json!([])] {
        send_json(&mut c, "DELETE", "/auth/account", &bad).expect_error(400, "invalid_input");
    }
    c.get("/auth/session").expect(200);

    let r = send_json(
        &mut c,
        "DELETE",
        "/auth/account",
        &json!({"password": PASSWORD}),
    );
    r.expect(204);
    let cleared = r.set_cookie("svc_session").expect("the cookie is cleared");
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    assert!(
        r.set_cookie("svc_csrf").is_some(),
        "a new CSRF cookie for no session"
    );
    for s in &mut streams {
        let took = s.wait_end(Duration::from_secs(1)).expect("stream ended");
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
    c.get("/auth/session").expect_error(401, "unauthorized");

    for (sql, left) in [
        ("SELECT count(*) FROM users WHERE id = $1", 0),
        ("SELECT count(*) FROM sessions WHERE user_id = $1", 0),
        ("SELECT count(*) FROM device_cookies WHERE user_id = $1", 0),
        ("SELECT count(*) FROM memberships WHERE user_id = $1", 0),
        ("SELECT count(*) FROM api_tokens WHERE created_by = $1", 0),
        ("SELECT count(*) FROM mail_tokens WHERE user_id = $1", 0),
    ] {
        assert_eq!(count(sql, id), left, "{sql}");
    }
    assert_eq!(
        count("SELECT count(*) FROM organizations WHERE id = $1", personal),
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM projects WHERE org_id = $1", personal),
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM projects WHERE id = $1", acme_project),
        1
    );
    assert_eq!(
        count("SELECT count(*) FROM memberships WHERE org_id = $1", acme),
        1
    );
    // The token nobody made goes on in the team's project.
    db().execute(
        "SELECT consoled_notify_change('server', 1, 'update', $1)",
        &[&acme_project],
    )
    .unwrap();
    loop {
        let change = kept_stream.change(T);
        assert_eq!(change["project_id"], acme_project);
        if change["type"] == "server" {
            break;
        }
    }
    // What stays: the notice to the address (sent after the account is gone).
    let notice: i64 = db()
        .query_one(
            "SELECT count(*) FROM outbox WHERE kind = 'account_deleted' AND recipient = $1
                AND user_id IS NULL AND details->>'by' = 'owner'",
            &[&email],
        )
        .unwrap()
        .get(0);
    assert_eq!(notice, 1);
    // The address is free again.
    let again = server.client().post(
        "/auth/signup",
        &json!({"email": email, "password": PASSWORD, "name": "Again"}),
    );
    again.expect(201);
}

#[test]
fn the_last_owner_of_a_team_cannot_delete_the_account() {
    let server = TestServer::start();
    let mut c = server.client();
    let (_, state) = c.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    let mut other = server.client();
    let (_, other_state) = other.signup();
    let other_id = other_state["user"]["id"].as_i64().unwrap();
    let acme = team("Acme Ops", &[(id, "owner"), (other_id, "admin")]);
    // A closed team blocks nothing.
    let closed = team("Old", &[(id, "owner"), (other_id, "member")]);
    db().execute(
        "UPDATE organizations SET status = 'closed' WHERE id = $1",
        &[&closed],
    )
    .unwrap();

    let r = send_json(&mut c, "DELETE", "/auth/account", &json!({}));
    r.expect_error(409, "last_owner");
    let error = &r.json()["error"];
    assert_eq!(
        error["details"],
        json!({"organizations": [{"id": acme, "name": "Acme Ops"}]})
    );
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("Acme Ops (id {acme})")),
        "{message}"
    );
    c.get("/auth/session").expect(200);

    db().execute(
        "UPDATE memberships SET role = 'owner' WHERE org_id = $1 AND user_id = $2",
        &[&acme, &other_id],
    )
    .unwrap();
    send_json(&mut c, "DELETE", "/auth/account", &json!({})).expect(204);
    let owners: Vec<i64> = db()
        .query(
            "SELECT user_id FROM memberships WHERE org_id = $1 AND role = 'owner'",
            &[&acme],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(owners, vec![other_id]);
}

/// The database holds the rules: a user deleted with plain SQL takes the personal organization
/// and its projects along, and one who alone owns a team cannot be deleted that way either.
#[test]
fn a_plain_sql_delete_follows_the_same_rules() {
    let server = TestServer::start();
    let (_, state) = server.client().signup();
    let id = state["user"]["id"].as_i64().unwrap();
    let personal = state["organizations"][0]["id"].as_i64().unwrap();
    let acme = team("Solo", &[(id, "owner")]);
    let refused = db()
        .execute("DELETE FROM users WHERE id = $1", &[&id])
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(&postgres::error::SqlState::RESTRICT_VIOLATION)
    );
    let text = refused.as_db_error().unwrap().message().to_string();
    assert!(text.contains(&format!("Solo (id {acme})")), "{text}");

    db().execute("DELETE FROM organizations WHERE id = $1", &[&acme])
        .unwrap();
    assert_eq!(
        db().execute("DELETE FROM users WHERE id = $1", &[&id])
            .unwrap(),
        1
    );
    assert_eq!(
        count("SELECT count(*) FROM organizations WHERE id = $1", personal),
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM projects WHERE org_id = $1", personal),
        0
    );
    let orphans: i64 = db()
        .query_one(
            "SELECT count(*) FROM organizations o
              WHERE NOT EXISTS (SELECT 1 FROM memberships m WHERE m.org_id = o.id)
                AND o.kind = 'personal'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(orphans, 0, "no personal organization without its owner");
}
