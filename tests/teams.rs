//! Team organizations, members and invitations (issue 32) over real HTTP, with the invitation
//! mails delivered over real SMTP to a sink on loopback: creating a team, inviting, accepting,
//! roles and who may change them, the last owner, leaving, the per-organization limit, and the
//! answers to another user's ids and to a role too low.

mod common;

use common::teams::{invitation_token, join, server, server_with, sink, Person};
use common::*;
use serde_json::{json, Value};

fn org_path(org: i64, rest: &str) -> String {
    format!("/v1/organizations/{org}{rest}")
}

/// The user's role in `org`, from `GET /v1/organizations`; `None` when not a member.
fn role_in(p: &mut Person, org: i64) -> Option<String> {
    let r = p.get("/v1/organizations");
    r.expect(200);
    r.json()["organizations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == org)
        .map(|o| o["role"].as_str().unwrap().to_string())
}

#[track_caller]
fn assert_forbidden(r: &Response, detail: &str, value: &str) {
    r.expect_error(403, "forbidden");
    assert_eq!(
        r.json()["error"]["details"][detail],
        value,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}

/// The whole flow a console shows: a team, an invitation mailed and accepted, a role changed.
#[test]
fn a_team_an_invitation_accepted_and_a_role_changed() {
    let server = server();
    let mut ada = Person::verified(&server);
    let mut bob = Person::verified(&server);

    let r = ada.post("/v1/organizations", &json!({ "name": "  Acme  " }));
    r.expect(201);
    let org = r.json()["id"].as_i64().unwrap();
    assert_eq!(
        r.json(),
        json!({"id": org, "name": "Acme", "kind": "team", "role": "owner", "status": "active"})
    );
    assert_eq!(role_in(&mut ada, org).as_deref(), Some("owner"));
    ada.get(&org_path(org, "")).expect(200);

    let r = ada.post(
        &org_path(org, "/invitations"),
        &json!({ "email": bob.email.to_uppercase(), "role": "member" }),
    );
    r.expect(201);
    let invitation = r.json();
    assert_eq!(invitation["email"], bob.email.as_str());
    assert_eq!(invitation["role"], "member");
    assert_eq!(invitation["invited_by"], ada.id);
    let listed = ada.get(&org_path(org, "/invitations"));
    listed.expect(200);
    assert_eq!(listed.json()["invitations"], json!([invitation]));

    let token = invitation_token(&bob.email, 1);
    let mail = sink()
        .to(&bob.email)
        .into_iter()
        .find(|m| m.token("/invitation").is_some());
    let mail = mail.expect("the invitation mail");
    assert_eq!(mail.subject(), "You are invited to the console");
    let text = mail.text();
    assert!(
        text.contains("Test User invited you to join the organization \"Acme\""),
        "{text}"
    );
    assert!(
        text.contains("as member") && text.contains("expires in 7 days"),
        "{text}"
    );

    let r = bob.accept(&token);
    r.expect(200);
    assert_eq!(r.json()["id"], org);
    assert_eq!(r.json()["role"], "member");
    assert_eq!(role_in(&mut bob, org).as_deref(), Some("member"));
    // Used once.
    bob.accept(&token).expect_error(400, "invalid_token");
    let listed = ada.get(&org_path(org, "/invitations"));
    assert_eq!(listed.json()["invitations"], json!([]));

    let members = bob.get(&org_path(org, "/members"));
    members.expect(200);
    let list = members.json()["members"].as_array().unwrap().clone();
    let ids: Vec<(i64, &str)> = list
        .iter()
        .map(|m| (m["user_id"].as_i64().unwrap(), m["role"].as_str().unwrap()))
        .collect();
    assert_eq!(ids, [(ada.id, "owner"), (bob.id, "member")]);
    assert_eq!(list[1]["email"], bob.email.as_str());

    let r = ada.patch(
        &org_path(org, &format!("/members/{}", bob.id)),
        &json!({ "role": "admin" }),
    );
    r.expect(200);
    assert_eq!(r.json()["role"], "admin");
    assert_eq!(role_in(&mut bob, org).as_deref(), Some("admin"));
    let r = ada.patch(&org_path(org, ""), &json!({ "name": "Acme Ltd" }));
    r.expect(200);
    assert_eq!(r.json()["name"], "Acme Ltd");
}

/// The link is accepted only by the invited address, verified; a refusal leaves it usable.
#[test]
fn an_invitation_is_accepted_only_by_its_own_verified_address() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Verified only");
    let mut carol = Person::new(&server);
    let mut mallory = Person::verified(&server);
    ada.invite(org, &carol.email, "viewer");
    let token = invitation_token(&carol.email, 1);

    assert_forbidden(&mallory.accept(&token), "invitation", "other_address");
    assert!(role_in(&mut mallory, org).is_none());
    assert_forbidden(&carol.accept(&token), "invitation", "email_unverified");
    db().execute(
        "UPDATE users SET email_verified = true WHERE id = $1",
        &[&carol.id],
    )
    .unwrap();
    carol.accept(&token).expect(200);
    assert_eq!(role_in(&mut carol, org).as_deref(), Some("viewer"));

    for bad in ["", "short", &"x".repeat(43), &format!("{token}x")] {
        carol.accept(bad).expect_error(400, "invalid_token");
    }
    carol
        .post("/v1/invitations/accept", &json!({}))
        .expect_error(400, "invalid_input");
}

/// Owners and admins invite, change roles below owner and remove members; members and viewers
/// do not; only owners make, unmake or remove owners.
#[test]
fn roles_decide_who_manages_members() {
    let server = server();
    let mut owner = Person::verified(&server);
    let org = owner.team("Roles");
    let mut admin = Person::verified(&server);
    let mut member = Person::verified(&server);
    let mut viewer = Person::verified(&server);
    join(&mut owner, &mut admin, org, "admin");
    join(&mut owner, &mut member, org, "member");
    join(&mut owner, &mut viewer, org, "viewer");
    let outsider = unique_email();
    let pending = owner.invite(org, &unique_email(), "viewer");

    for p in [&mut member, &mut viewer] {
        p.get(&org_path(org, "/members")).expect(200);
        p.get(&org_path(org, "")).expect(200);
        let needs_admin = [
            p.patch(&org_path(org, ""), &json!({ "name": "Mine" })),
            p.post(
                &org_path(org, "/invitations"),
                &json!({ "email": outsider, "role": "viewer" }),
            ),
            p.get(&org_path(org, "/invitations")),
            p.delete(&org_path(org, &format!("/invitations/{pending}"))),
            p.patch(
                &org_path(org, &format!("/members/{}", admin.id)),
                &json!({ "role": "viewer" }),
            ),
            p.delete(&org_path(org, &format!("/members/{}", admin.id))),
        ];
        for r in needs_admin {
            assert_forbidden(&r, "needed_role", "admin");
        }
    }

    // An admin manages below owner...
    admin.invite(org, &outsider, "member");
    let r = admin.patch(
        &org_path(org, &format!("/members/{}", member.id)),
        &json!({ "role": "viewer" }),
    );
    r.expect(200);
    admin
        .patch(
            &org_path(org, &format!("/members/{}", member.id)),
            &json!({ "role": "admin" }),
        )
        .expect(200);
    admin
        .patch(
            &org_path(org, &format!("/members/{}", member.id)),
            &json!({ "role": "member" }),
        )
        .expect(200);
    // ... but never makes, unmakes, invites or removes an owner.
    let owner_only = [
        admin.post(
            &org_path(org, "/invitations"),
            &json!({ "email": outsider, "role": "owner" }),
        ),
        admin.patch(
            &org_path(org, &format!("/members/{}", member.id)),
            &json!({ "role": "owner" }),
        ),
        admin.patch(
            &org_path(org, &format!("/members/{}", owner.id)),
            &json!({ "role": "admin" }),
        ),
        admin.delete(&org_path(org, &format!("/members/{}", owner.id))),
    ];
    for r in owner_only {
        assert_forbidden(&r, "needed_role", "owner");
    }
    admin
        .delete(&org_path(org, &format!("/members/{}", viewer.id)))
        .expect(204);
    assert!(role_in(&mut viewer, org).is_none());
    viewer
        .get(&org_path(org, ""))
        .expect_error(404, "not_found");

    // An owner makes and unmakes owners.
    owner
        .patch(
            &org_path(org, &format!("/members/{}", admin.id)),
            &json!({ "role": "owner" }),
        )
        .expect(200);
    admin
        .patch(
            &org_path(org, &format!("/members/{}", owner.id)),
            &json!({ "role": "member" }),
        )
        .expect(200);
    assert_eq!(role_in(&mut owner, org).as_deref(), Some("member"));
}

/// An organization keeps an owner: the last one can neither leave nor be demoted; anyone else
/// may leave.
#[test]
fn the_last_owner_can_neither_leave_nor_be_demoted() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Kept");
    let me = org_path(org, &format!("/members/{}", ada.id));
    ada.delete(&me).expect_error(409, "last_owner");
    ada.patch(&me, &json!({ "role": "admin" }))
        .expect_error(409, "last_owner");
    ada.patch(&me, &json!({ "role": "owner" })).expect(200);

    let mut bob = Person::verified(&server);
    join(&mut ada, &mut bob, org, "viewer");
    bob.delete(&org_path(org, &format!("/members/{}", bob.id)))
        .expect(204);
    assert!(role_in(&mut bob, org).is_none());
    bob.get(&org_path(org, "/members"))
        .expect_error(404, "not_found");

    let mut cy = Person::verified(&server);
    join(&mut ada, &mut cy, org, "owner");
    ada.delete(&me).expect(204);
    let cy_path = org_path(org, &format!("/members/{}", cy.id));
    cy.patch(&cy_path, &json!({ "role": "member" }))
        .expect_error(409, "last_owner");
}

/// Two owners demoting each other at once: the organization keeps one (its row lock).
#[test]
fn two_owners_demoting_each_other_at_once_leave_one_owner() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Race");
    let mut bob = Person::verified(&server);
    join(&mut ada, &mut bob, org, "owner");
    let ada_path = org_path(org, &format!("/members/{}", ada.id));
    let bob_path = org_path(org, &format!("/members/{}", bob.id));
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| ada.patch(&bob_path, &json!({ "role": "admin" })));
        let b = s.spawn(|| bob.patch(&ada_path, &json!({ "role": "admin" })));
        (a.join().unwrap(), b.join().unwrap())
    });
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert!(
        statuses == [200, 403] || statuses == [200, 409],
        "{statuses:?}"
    );
    let owners: i64 = db()
        .query_one(
            "SELECT count(*) FROM memberships WHERE org_id = $1 AND role = 'owner'",
            &[&org],
        )
        .unwrap()
        .get(0);
    assert_eq!(owners, 1);
}

#[test]
fn a_personal_organization_takes_no_members() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.personal_org;
    let r = ada.post(
        &org_path(org, "/invitations"),
        &json!({ "email": unique_email(), "role": "member" }),
    );
    assert_forbidden(&r, "org_kind", "personal");
    assert_forbidden(
        &ada.delete(&org_path(org, &format!("/members/{}", ada.id))),
        "org_kind",
        "personal",
    );
    // Renaming it is fine.
    ada.patch(&org_path(org, ""), &json!({ "name": "Ada's" }))
        .expect(200);
}

/// Every organization endpoint answers another user's organization, and one that does not
/// exist, with the same 404.
#[test]
fn another_users_organization_is_404_on_every_endpoint() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Private");
    let invitation = ada.invite(org, &unique_email(), "member");
    let mut eve = Person::verified(&server);
    for id in [
        org.to_string(),
        "999999999".into(),
        "x".into(),
        "0".into(),
        "-1".into(),
    ] {
        let p = |rest: &str| format!("/v1/organizations/{id}{rest}");
        let answers = [
            eve.get(&p("")),
            eve.patch(&p(""), &json!({ "name": "Mine" })),
            eve.get(&p("/members")),
            eve.patch(
                &p(&format!("/members/{}", ada.id)),
                &json!({ "role": "viewer" }),
            ),
            eve.delete(&p(&format!("/members/{}", ada.id))),
            eve.delete(&p(&format!("/members/{}", eve.id))),
            eve.get(&p("/invitations")),
            eve.post(
                &p("/invitations"),
                &json!({ "email": eve.email, "role": "owner" }),
            ),
            eve.delete(&p(&format!("/invitations/{invitation}"))),
            eve.get(&p("/projects")),
            eve.post(&p("/projects"), &json!({ "name": "mine" })),
        ];
        for r in answers {
            r.expect_error(404, "not_found");
        }
    }
    // A member cannot reach another organization's invitation or member through its own.
    let mine = eve.team("Eve's");
    eve.delete(&org_path(mine, &format!("/invitations/{invitation}")))
        .expect_error(404, "not_found");
    eve.patch(
        &org_path(mine, &format!("/members/{}", ada.id)),
        &json!({ "role": "viewer" }),
    )
    .expect_error(404, "not_found");
    assert_eq!(
        ada.get(&org_path(org, "/invitations")).json()["invitations"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// A cancelled invitation's link stops working; a newer invitation of the address replaces the
/// open one; an address that is a member already is not invited again.
#[test]
fn cancelled_and_replaced_invitations_stop_working() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Changes");
    let mut bob = Person::verified(&server);
    let first = ada.invite(org, &bob.email, "admin");
    let token = invitation_token(&bob.email, 1);
    ada.delete(&org_path(org, &format!("/invitations/{first}")))
        .expect(204);
    ada.delete(&org_path(org, &format!("/invitations/{first}")))
        .expect_error(404, "not_found");
    bob.accept(&token).expect_error(400, "invalid_token");

    ada.invite(org, &bob.email, "admin");
    let older = invitation_token(&bob.email, 2);
    ada.invite(org, &bob.email, "viewer");
    let newer = invitation_token(&bob.email, 3);
    let open = ada.get(&org_path(org, "/invitations")).json()["invitations"].clone();
    assert_eq!(open.as_array().unwrap().len(), 1, "{open}");
    assert_eq!(open[0]["role"], "viewer");
    bob.accept(&older).expect_error(400, "invalid_token");
    bob.accept(&newer).expect(200);
    assert_eq!(role_in(&mut bob, org).as_deref(), Some("viewer"));
    let r = ada.post(
        &org_path(org, "/invitations"),
        &json!({ "email": bob.email, "role": "admin" }),
    );
    r.expect_error(409, "already_member");
}

/// Invitations are counted per organization (`CONSOLED_INVITATIONS_PER_ORG`).
#[test]
fn invitations_are_rate_limited_per_organization() {
    let server = server_with(&[("CONSOLED_INVITATIONS_PER_ORG", "3")]);
    let mut ada = Person::verified(&server);
    let (busy, other) = (ada.team("Busy"), ada.team("Other"));
    for _ in 0..3 {
        ada.invite(busy, &unique_email(), "viewer");
    }
    let r = ada.post(
        &org_path(busy, "/invitations"),
        &json!({ "email": unique_email(), "role": "viewer" }),
    );
    r.expect_error(429, "rate_limited");
    assert!(r.header("retry-after").is_some());
    ada.invite(other, &unique_email(), "viewer");
}

/// Bad input is a JSON 4xx naming what is wrong; never a 5xx.
#[test]
fn bad_input_is_a_json_4xx() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Input");
    let cases: Vec<(&str, String, Value, &str)> = vec![
        ("POST", "/v1/organizations".into(), json!({}), "name"),
        (
            "POST",
            "/v1/organizations".into(),
            json!({ "name": "x".repeat(101) }),
            "name",
        ),
        (
            "POST",
            "/v1/organizations".into(),
            json!({ "name": "a\u{7}b" }),
            "name",
        ),
        (
            "POST",
            "/v1/organizations".into(),
            json!({ "name": 5 }),
            "name",
        ),
        ("PATCH", org_path(org, ""), json!({ "name": "   " }), "name"),
        (
            "POST",
            org_path(org, "/invitations"),
            json!({ "email": "nope", "role": "member" }),
            "email",
        ),
        (
            "POST",
            org_path(org, "/invitations"),
            json!({ "email": unique_email(), "role": "boss" }),
            "role",
        ),
        (
            "POST",
            org_path(org, "/invitations"),
            json!({ "email": unique_email() }),
            "role",
        ),
        (
            "PATCH",
            org_path(org, &format!("/members/{}", ada.id)),
            json!({ "role": "Owner" }),
            "role",
        ),
    ];
    for (method, path, body, field) in cases {
        let r = ada.send(method, &path, Some(&body));
        r.expect_error(400, "invalid_input");
        assert_eq!(
            r.json()["error"]["details"]["field"],
            field,
            "{method} {path} {body}"
        );
    }
    let token = ada.client.csrf();
    let json_type = ("Content-Type", "application/json");
    let r = ada.client.send(
        "POST",
        "/v1/organizations",
        &[("X-CSRF-Token", &token), json_type],
        b"{",
    );
    r.expect_error(400, "invalid_input");
    let r = ada.client.send(
        "PATCH",
        &org_path(org, ""),
        &[("X-CSRF-Token", &token), ("Content-Type", "text/plain")],
        b"{\"name\":\"x\"}",
    );
    r.expect_error(415, "unsupported_media_type");
    let r = ada.client.send(
        "POST",
        "/v1/organizations",
        &[("Content-Type", "application/json")],
        b"{\"name\":\"x\"}",
    );
    r.expect_error(403, "csrf_invalid");
    ada.send("PUT", &org_path(org, ""), None)
        .expect_error(405, "method_not_allowed");
    let mut anonymous = server.client();
    anonymous
        .get("/v1/organizations")
        .expect_error(401, "unauthorized");
}

/// Organizations made per user are limited (`CONSOLED_ORGS_PER_USER`).
#[test]
fn team_creation_is_rate_limited_per_user() {
    let server = server_with(&[("CONSOLED_ORGS_PER_USER", "2")]);
    let mut ada = Person::verified(&server);
    ada.team("One");
    ada.team("Two");
    ada.post("/v1/organizations", &json!({ "name": "Three" }))
        .expect_error(429, "rate_limited");
    let mut bob = Person::verified(&server);
    bob.team("Bob's");
}

fn consoled(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_consoled"))
        .args(args)
        .env("DATABASE_URL", database_url())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run consoled")
}

/// `consoled invitation create --org ID --role ROLE` mails an invitation as an owner's would
/// (not counted against the organization's limit); what it cannot do, it refuses by name.
#[test]
fn the_operator_invites_into_an_organization() {
    let server = server_with(&[("CONSOLED_INVITATIONS_PER_ORG", "1")]);
    let mut ada = Person::verified(&server);
    let org = ada.team("The operator's");
    ada.invite(org, &unique_email(), "viewer");
    let mut bob = Person::verified(&server);
    let out = consoled(&[
        "invitation",
        "create",
        "--email",
        &bob.email,
        "--org",
        &org.to_string(),
        "--role",
        "admin",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["org_id"], org);
    assert_eq!(printed["role"], "admin");
    assert_eq!(printed["invited_by"], Value::Null);
    let token = invitation_token(&bob.email, 1);
    let r = bob.accept(&token);
    r.expect(200);
    assert_eq!(r.json()["role"], "admin");

    let personal = ada.personal_org.to_string();
    let email = unique_email();
    let refusals: [(&[&str], &str); 5] = [
        (&["--email", &email, "--org", &personal], "personal"),
        (&["--email", &email, "--org", "999999999"], "does not exist"),
        (
            &["--email", &email, "--org", &personal, "--role", "boss"],
            "--role",
        ),
        (
            &["--email", &email, "--role", "admin"],
            "--role needs --org",
        ),
        (&["--email", "not-an-address"], "not an email address"),
    ];
    for (args, says) in refusals {
        let mut all = vec!["invitation", "create"];
        all.extend_from_slice(args);
        let out = consoled(&all);
        assert!(!out.status.success(), "{all:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{all:?}: {stderr}");
    }
}

/// Found by schemathesis: an invitation replaced (or cancelled) while the sender was mailing the
/// one it replaces could deadlock with the sender (the request deleting the invitation waited
/// for the sender's lock on its outbox row, the sender for the request's lock on the
/// invitation), and PostgreSQL cancelled one of them: a 500, or a mail failed. Re-invitations in
/// a row, with the sender busy mailing each, must all succeed.
#[test]
fn replacing_invitations_while_their_mail_goes_out_never_fails() {
    let server = server_with(&[("CONSOLED_INVITATIONS_PER_ORG", "1000")]);
    let mut ada = Person::verified(&server);
    let org = ada.team("Busy sender");
    let email = unique_email();
    for i in 0..150 {
        let path = org_path(org, "/invitations");
        let role = if i % 2 == 0 { "member" } else { "viewer" };
        let r = ada.post(&path, &json!({ "email": email, "role": role }));
        assert_eq!(
            r.status,
            201,
            "invitation {i}: {}",
            String::from_utf8_lossy(&r.body)
        );
        if i % 3 == 0 {
            let id = r.json()["id"].as_i64().unwrap();
            let r = ada.delete(&org_path(org, &format!("/invitations/{id}")));
            assert_eq!(
                r.status,
                204,
                "cancel {i}: {}",
                String::from_utf8_lossy(&r.body)
            );
        }
    }
}
