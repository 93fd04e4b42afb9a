//! Projects over `/v1` (issue 32): created, listed, renamed and deleted by owners and admins,
//! read by every member; another organization's project is 404; deleting one deletes its API
//! tokens, ends their streams at once and is announced to the members' streams.

mod common;

use std::time::Duration;

use common::account::cli;
use common::sse::{self, Ev};
use common::teams::{join, server, Person};
use common::*;
use serde_json::json;

const T: Duration = Duration::from_secs(5);

fn projects_of(p: &mut Person, org: i64) -> Vec<String> {
    let r = p.get(&format!("/v1/organizations/{org}/projects"));
    r.expect(200);
    r.json()["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn admins_create_rename_and_delete_projects_and_members_read_them() {
    let server = server();
    let mut owner = Person::verified(&server);
    let org = owner.team("Projects");
    let mut admin = Person::verified(&server);
    let mut member = Person::verified(&server);
    let mut viewer = Person::verified(&server);
    join(&mut owner, &mut admin, org, "admin");
    join(&mut owner, &mut member, org, "member");
    join(&mut owner, &mut viewer, org, "viewer");

    let path = format!("/v1/organizations/{org}/projects");
    let r = admin.post(&path, &json!({ "name": " web " }));
    r.expect(201);
    let project = r.json();
    let id = project["id"].as_i64().unwrap();
    assert_eq!(project["org_id"], org);
    assert_eq!(project["name"], "web");
    assert!(project["created"].as_str().unwrap().ends_with('Z'));
    admin
        .post(&path, &json!({ "name": "web" }))
        .expect_error(409, "name_taken");
    owner.post(&path, &json!({ "name": "api" })).expect(201);

    for p in [&mut member, &mut viewer] {
        assert_eq!(projects_of(p, org), ["web", "api"]);
        let r = p.get(&format!("/v1/projects/{id}"));
        r.expect(200);
        assert_eq!(r.json(), project);
        let refused = [
            p.post(&path, &json!({ "name": "mine" })),
            p.patch(&format!("/v1/projects/{id}"), &json!({ "name": "mine" })),
            p.delete(&format!("/v1/projects/{id}")),
        ];
        for r in refused {
            r.expect_error(403, "forbidden");
            assert_eq!(r.json()["error"]["details"]["needed_role"], "admin");
        }
    }

    let r = admin.patch(
        &format!("/v1/projects/{id}"),
        &json!({ "name": "frontend" }),
    );
    r.expect(200);
    assert_eq!(r.json()["name"], "frontend");
    admin
        .patch(&format!("/v1/projects/{id}"), &json!({ "name": "api" }))
        .expect_error(409, "name_taken");
    admin
        .patch(&format!("/v1/projects/{id}"), &json!({ "name": "" }))
        .expect_error(400, "invalid_input");
    admin.delete(&format!("/v1/projects/{id}")).expect(204);
    assert_eq!(projects_of(&mut member, org), ["api"]);
    member
        .get(&format!("/v1/projects/{id}"))
        .expect_error(404, "not_found");
    admin
        .delete(&format!("/v1/projects/{id}"))
        .expect_error(404, "not_found");
}

#[test]
fn another_organizations_project_is_404() {
    let server = server();
    let mut ada = Person::verified(&server);
    let state = ada.get("/auth/session").json();
    let project = project_of(&state);
    let mut eve = Person::verified(&server);
    for id in [project.to_string(), "999999999".into(), "x".into()] {
        let p = format!("/v1/projects/{id}");
        eve.get(&p).expect_error(404, "not_found");
        eve.patch(&p, &json!({ "name": "mine" }))
            .expect_error(404, "not_found");
        eve.delete(&p).expect_error(404, "not_found");
    }
    let r = ada.get(&format!("/v1/projects/{project}"));
    r.expect(200);
    assert_eq!(r.json()["name"], "default");
}

/// Deleting a project deletes its tokens: their streams end within a second, the tokens are
/// refused, and the members' streams are told (`api_token delete`, `project delete`).
#[test]
fn deleting_a_project_revokes_its_tokens_and_ends_their_streams() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Doomed");
    let r = ada.post(
        &format!("/v1/organizations/{org}/projects"),
        &json!({ "name": "doomed" }),
    );
    let project = r.json()["id"].as_i64().unwrap();
    let token = cli(&["token", "create", "--project", &project.to_string()]);
    let (token_id, secret) = (
        token["id"].as_i64().unwrap(),
        token["token"].as_str().unwrap().to_string(),
    );
    let bearer = format!("Bearer {secret}");
    let mut token_stream = sse::open(server.addr, &[("Authorization", &bearer)]);
    assert_eq!(token_stream.next(T), Ev::Ready);
    let mut session_stream = sse::open(server.addr, &[("Cookie", &ada.cookie())]);
    assert_eq!(session_stream.next(T), Ev::Ready);

    ada.delete(&format!("/v1/projects/{project}")).expect(204);
    let ended = token_stream.wait_end(Duration::from_secs(3));
    assert!(
        ended.is_some_and(|d| d < Duration::from_secs(1)),
        "{ended:?}"
    );
    let again = sse::open(server.addr, &[("Authorization", &bearer)]);
    assert_eq!(again.status, 401);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match session_stream.next_event(T) {
            Ev::Change(v) => seen.push((v["type"].clone(), v["id"].clone(), v["op"].clone())),
            other => panic!("{other:?} after {seen:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            (json!("api_token"), json!(token_id), json!("delete")),
            (json!("project"), json!(project), json!("delete")),
        ]
    );
}
