//! Names and passwords in Unicode (issue 37, item 9): a name cannot carry bidirectional
//! overrides or isolates, nor be made only of invisible characters (it becomes an
//! organization's name that others see); a password is compared after normalisation (NFC), so
//! one typed on another keyboard still signs in, and passwords hashed before that keep working.

mod common;

use common::*;
use serde_json::json;

/// "Ünïcödé pässwörd" with each accented letter as a base letter and a combining mark (NFD, as
/// macOS file names and some input methods produce it) and precomposed (NFC, as most keyboards).
const DECOMPOSED: &str = "U\u{308}ni\u{308}co\u{308}de\u{301} pa\u{308}sswo\u{308}rd";
const COMPOSED: &str = "\u{dc}n\u{ef}c\u{f6}d\u{e9} p\u{e4}ssw\u{f6}rd";

fn signup(c: &mut Client, email: &str, password: &str, name: &str) -> Response {
    c.post(
        "/auth/signup",
        &json!({"email": email, "password": password, "name": name}),
    )
}

#[test]
fn names_refuse_bidirectional_controls_and_invisible_only_text() {
    let server = TestServer::start();
    let mut c = server.client();
    for name in [
        "Acme \u{202e}lapyap",
        "\u{202d}Acme",
        "Acme \u{2066}Corp\u{2069}",
        "\u{2067}Acme",
        "\u{2068}x",
        "\u{200b}",
        "\u{200b}\u{200c}\u{200d}\u{2060}",
        "\u{3164}",
        "\u{115f}\u{1160}",
        "\u{feff} \u{2800}",
        "\u{e0041}\u{e0042}",
    ] {
        let r = signup(&mut c, &unique_email(), PASSWORD, name);
        r.expect_error(400, "invalid_input");
        assert_eq!(r.json()["error"]["details"]["field"], "name", "{name:?}");
    }
    for name in [
        "Jose\u{301} Nu\u{303}ez",
        "\u{646}\u{648}\u{631}",
        "\u{1f468}\u{200d}\u{1f469}\u{200d}\u{1f467} Family",
        "\u{5d0}\u{5d1} \u{200f}Ltd",
        "Ada",
    ] {
        signup(&mut c, &unique_email(), PASSWORD, name).expect(201);
    }
}

#[test]
fn a_password_signs_in_whether_typed_composed_or_decomposed() {
    let server = TestServer::start();
    for (set, typed) in [(DECOMPOSED, COMPOSED), (COMPOSED, DECOMPOSED)] {
        let email = unique_email();
        signup(&mut server.client(), &email, set, "N").expect(201);
        server.client().login(&email, typed).expect(200);
        server.client().login(&email, set).expect(200);
    }
}

/// A hash made before normalisation, of the decomposed form as it was typed, keeps signing in
/// with that form; the first such sign-in stores the normalised form's hash, so the password
/// typed composed works from then on.
#[test]
fn a_password_hashed_before_normalisation_keeps_working() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, state) = c.signup();
    let legacy = consoled::hashing::hash_blocking(DECOMPOSED).unwrap();
    db().execute(
        "UPDATE users SET password_hash = $2 WHERE id = $1",
        &[&state["user"]["id"].as_i64().unwrap(), &legacy],
    )
    .unwrap();
    server.client().login(&email, DECOMPOSED).expect(200);
    server.client().login(&email, COMPOSED).expect(200);
    server.client().login(&email, DECOMPOSED).expect(200);
    server
        .client()
        .login(&email, PASSWORD)
        .expect_error(401, "invalid_credentials");
}
