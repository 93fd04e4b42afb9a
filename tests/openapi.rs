//! The OpenAPI document and the router cannot drift: every dispatched route is documented and
//! every documented operation is dispatched. The document is served at /openapi.json.

mod common;

use std::collections::BTreeSet;

use consoled::router::{method_name, ROUTES};
use serde_json::Value;

fn documented() -> BTreeSet<(String, String)> {
    let doc: Value =
        serde_json::from_str(consoled::ops::OPENAPI).expect("docs/openapi.json is JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            // `{provider}` in the document is `*` in the router.
            let pattern: String = path
                .split('/')
                .map(|seg| if seg.starts_with('{') { "*" } else { seg })
                .collect::<Vec<_>>()
                .join("/");
            ops.insert((method.to_uppercase(), pattern));
        }
    }
    ops
}

#[test]
fn every_route_is_documented_and_every_documented_operation_is_routed() {
    let routed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (method_name(r.method).to_string(), r.pattern.to_string()))
        .collect();
    let documented = documented();
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from docs/openapi.json: {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "documented but not routed: {unrouted:?}"
    );
}

#[test]
fn the_document_is_served() {
    let server = common::TestServer::start();
    let r = server.client().get("/openapi.json");
    r.expect(200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["info"]["title"], "consoled");
}
