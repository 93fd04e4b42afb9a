//! Deleting one's own account (issue 32, item 4): proof of presence; what goes with the account
//! and what stays; a team the user alone owns blocks it (409). A plain SQL delete of a user
//! follows the same rules.

mod common;

use std::time::Duration;

use common::account::{cli, ready, send_json, stream_of, team};
use common::sse;
use common::*;
use serde_json::json;

const T: Duration = Duration::from_secs(5);

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
