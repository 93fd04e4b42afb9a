//! The demo page in a real browser (Debian's headless chromium through chromedriver): sign up
//! through the form, turn the second factor on in the page (the key as a link, text and a QR
//! code; the recovery codes shown once), log out, log in with the second factor, wait for the
//! event stream's `ready`, emit a change with `consoled emit` and see it appear on the page, then
//! turn the second factor off with a recovery code. Then the mails' links, as `make run` logs
//! them: the verification mail sent again from the page, its link confirms the address and, opened
//! again, says it was used instead of offering "Confirm"; the reset link (asked for on the login
//! form) sets a new password that then signs in; the signed-in panel lists the own sessions and
//! changes the password (a common one refused). And teams: an organization made in the page, an
//! invitation mailed, its link signing the invited person up into the team, a role changed.
//!
//! Ignored by `make test` (it needs chromium and takes a few seconds): `make e2e` installs the
//! browser when missing and runs `cargo test --test e2e -- --ignored`. The screenshot of the
//! final page is kept at target/e2e/demo.png (target/e2e/failure.png when a step fails).

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::webdriver::{self, Browser};

const BIN: &str = env!("CARGO_BIN_EXE_consoled");

/// The real binary, serving the demo on a free port; killed on drop.
struct Server {
    child: Child,
    url: String,
    _mail: common::tempdir::TempDir,
}

impl Server {
    fn start() -> Server {
        let port = webdriver::free_port();
        let mail = common::tempdir::TempDir::new();
        let child = Command::new(BIN)
            .arg("serve")
            .env("DATABASE_URL", common::database_url())
            .env("CONSOLED_LISTEN", format!("127.0.0.1:{port}"))
            .env("CONSOLED_BASE_URL", format!("http://127.0.0.1:{port}"))
            .env("CONSOLED_DEMO", "true")
            .env("CONSOLED_COOKIE_SECURE", "false")
            .env("CONSOLED_MAIL_DIR", &mail.0)
            // The test database is shared: leave queued mail to the mail tests.
            .env("CONSOLED_MAIL_SENDER", "false")
            .env("CONSOLED_HASH_THREADS", "1")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start target/debug/consoled");
        let server = Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _mail: mail,
        };
        server.wait_healthy();
        server
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = self.url.trim_start_matches("http://").parse().unwrap();
        while std::net::TcpStream::connect(addr).is_err()
            || common::raw_request(addr, "GET", "/healthz", &[], b"").status != 200
        {
            assert!(Instant::now() < deadline, "consoled did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/e2e")
        .join(name)
}

fn totp_now(secret: &[u8], after_step: u64) -> (String, u64) {
    // A code is accepted once per step (replay defence): take a later step than the last one,
    // still inside the ±1 window.
    let step = (consoled::crypto::unix_now() / 30).max(after_step + 1);
    (consoled::crypto::totp_code(secret, step), step)
}

/// The user's personal organization and its `default` project, as the API and the database
/// know them.
fn personal_project(org_id: i64) -> i64 {
    let row = common::db()
        .query_one(
            "SELECT id FROM projects WHERE org_id = $1 AND name = 'default'",
            &[&org_id],
        )
        .expect("the default project");
    row.get(0)
}

fn emit(kind: &str, id: i64, op: &str, project: i64, org: i64) {
    let out = Command::new(BIN)
        .args(["emit", "--type", kind, "--id", &id.to_string(), "--op", op])
        .args(["--project", &project.to_string(), "--org", &org.to_string()])
        .env("DATABASE_URL", common::database_url())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run consoled emit");
    assert!(
        out.status.success(),
        "consoled emit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const STEP: Duration = Duration::from_secs(15);

#[test]
#[ignore = "needs chromium and chromedriver; run by `make e2e`"]
fn the_demo_page_signs_in_with_a_second_factor_and_lists_changes_live() {
    assert!(
        webdriver::available(),
        "chromium or chromedriver is missing: run scripts/e2e-deps.sh (as root) or `make e2e`"
    );
    let server = Server::start();
    let browser = Browser::start();
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_flow(&server, &browser)));
    if let Err(panic) = outcome {
        let path = screenshot_path("failure.png");
        browser.screenshot(&path);
        eprintln!("e2e: the page at the failure is in {}", path.display());
        std::panic::resume_unwind(panic);
    }
    let path = screenshot_path("demo.png");
    browser.screenshot(&path);
    eprintln!("e2e: screenshot in {}", path.display());
}

/// Runs `flow` in a fresh browser; on failure keeps a screenshot of the page at that moment.
fn in_browser(shot: &str, flow: impl FnOnce(&Browser)) {
    let browser = Browser::start();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| flow(&browser)));
    if let Err(panic) = outcome {
        let path = screenshot_path("failure.png");
        browser.screenshot(&path);
        eprintln!("e2e: the page at the failure is in {}", path.display());
        std::panic::resume_unwind(panic);
    }
    let path = screenshot_path(shot);
    browser.screenshot(&path);
    eprintln!("e2e: screenshot in {}", path.display());
}

#[test]
#[ignore = "needs chromium and chromedriver; run by `make e2e`"]
fn the_mailed_verify_and_reset_links_finish_in_the_demo() {
    assert!(
        webdriver::available(),
        "chromium or chromedriver is missing: run scripts/e2e-deps.sh (as root) or `make e2e`"
    );
    // As `make run` starts it: mail to files, each mailed link in the log.
    let server = common::binary::Spawned::start(BIN, &[]);
    in_browser("links.png", |b| links_flow(&server, b));
}

fn links_flow(server: &common::binary::Spawned, b: &Browser) {
    let email = common::unique_email();
    b.goto(&format!("{}/", server.url));
    b.wait("the signup form", STEP, |b| b.displayed("#signup-form"));
    b.type_into("#signup-email", &email);
    b.type_into("#signup-name", "Link User");
    b.type_into("#signup-password", common::PASSWORD);
    b.click("#signup-submit");
    b.wait("the signed-in panel", STEP, |b| {
        b.text("#who").contains(&email)
    });
    assert_eq!(b.text("#verified"), "no");

    // The mail again, from the page: a second link is mailed.
    server.mailed_link(&email, "verify-email");
    b.wait("the resend button", STEP, |b| b.displayed("#resend"));
    b.click("#resend");
    b.wait("the resend notice", STEP, |b| {
        b.text("#notice").contains("on its way")
    });
    let links = |server: &common::binary::Spawned| -> Vec<String> {
        let to = format!("to={email}:");
        server
            .log()
            .iter()
            .filter(|l| {
                l.contains("mailed link") && l.contains(&to) && l.contains("/verify-email?")
            })
            .map(|l| l.rsplit(' ').next().unwrap().to_string())
            .collect()
    };
    let deadline = std::time::Instant::now() + STEP;
    while links(server).len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "no second verification mail"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let link = links(server)[1].clone();

    // The verification link, opened as from the mail: one click confirms the address.
    b.goto(&link);
    b.wait("the confirm button", STEP, |b| {
        b.displayed("#verify-submit")
    });
    b.click("#verify-submit");
    b.wait("the confirmation", STEP, |b| {
        b.text("#notice").contains("confirmed") && b.text("#verified") == "yes"
    });
    assert_eq!(b.text("#message"), "");
    assert!(!b.displayed("#verify"));
    assert!(!b.displayed("#verify-hint"), "no resend once confirmed");

    // Opened again: used, says the page, and offers no button.
    b.goto(&link);
    b.wait("the used-link notice", STEP, |b| {
        b.text("#notice").contains("used already")
    });
    assert!(!b.displayed("#verify-submit"));
    // The first mail's link, never used, while signed in with the address confirmed: nothing is
    // left to confirm either.
    b.goto(&links(server)[0]);
    b.wait("the already-confirmed notice", STEP, |b| {
        b.text("#notice").contains("confirmed already")
    });
    assert!(!b.displayed("#verify-submit"));

    // Opened again signed out (another browser, say): the page says the link was used.
    b.click("#logout");
    b.wait("the login form", STEP, |b| b.displayed("#login-form"));
    b.goto(&link);
    b.wait("the used-link notice", STEP, |b| {
        b.text("#notice").contains("used already")
    });
    assert!(!b.displayed("#verify-submit"));
    assert_eq!(b.text("#message"), "");

    // Forgot password from the login form, then the reset link sets a new password.
    b.wait("the forgot-password form", STEP, |b| {
        b.displayed("#forgot-form")
    });
    b.type_into("#forgot-email", &email);
    b.click("#forgot-submit");
    b.wait("the reset-mail notice", STEP, |b| {
        b.text("#notice").contains("reset link")
    });
    b.goto(&server.mailed_link(&email, "reset-password"));
    b.wait("the new-password form", STEP, |b| {
        b.displayed("#reset-form")
    });
    let new_password = "a new long password";
    b.type_into("#reset-password", new_password);
    b.click("#reset-submit");
    b.wait("the password-changed notice", STEP, |b| {
        b.text("#notice").contains("password is changed") && b.displayed("#login-form")
    });
    assert_eq!(b.text("#message"), "");

    // The old password is refused, the new one signs in.
    b.type_into("#login-email", &email);
    b.type_into("#login-password", common::PASSWORD);
    b.click("#login-submit");
    b.wait("the refusal of the old password", STEP, |b| {
        b.text("#message").contains("invalid_credentials")
    });
    b.type_into("#login-email", &email);
    b.type_into("#login-password", new_password);
    b.click("#login-submit");
    b.wait("the signed-in panel with the new password", STEP, |b| {
        b.text("#who").contains(&email) && b.text("#verified") == "yes"
    });

    // Issue 25: the own sessions list this browser's session; the password changes from the
    // signed-in panel, refusing a common one first, and this session goes on.
    b.wait("this session in the sessions list", STEP, |b| {
        b.text("#sessions").contains("this one")
    });
    b.type_into("#change-current", new_password);
    b.type_into("#change-password", "password123");
    b.click("#change-submit");
    b.wait("the refusal of a common password", STEP, |b| {
        b.text("#message").contains("most common")
    });
    b.type_into("#change-current", new_password);
    b.type_into("#change-password", "a third long password");
    b.click("#change-submit");
    b.wait("the password-changed notice", STEP, |b| {
        b.text("#notice").contains("every other session") && b.text("#who").contains(&email)
    });
    assert_eq!(b.text("#message"), "");
}

/// Issue 32: the account panel of the demo: name and locale, an address change finished by the
/// mailed link, the export, and the account deleted (then its address cannot sign in).
#[test]
#[ignore = "needs chromium and chromedriver; run by `make e2e`"]
fn the_account_is_renamed_moved_exported_and_deleted_in_the_demo() {
    assert!(
        webdriver::available(),
        "chromium or chromedriver is missing: run scripts/e2e-deps.sh (as root) or `make e2e`"
    );
    let server = common::binary::Spawned::start(BIN, &[]);
    in_browser("account.png", |b| account_flow(&server, b));
}

fn account_flow(server: &common::binary::Spawned, b: &Browser) {
    let email = common::unique_email();
    b.goto(&format!("{}/", server.url));
    b.wait("the signup form", STEP, |b| b.displayed("#signup-form"));
    b.type_into("#signup-email", &email);
    b.type_into("#signup-name", "Account User");
    b.type_into("#signup-password", common::PASSWORD);
    b.click("#signup-submit");
    b.wait("the signed-in panel", STEP, |b| {
        b.text("#who").contains(&email)
    });

    // Name and locale.
    b.wait("the account panel", STEP, |b| b.displayed("#profile-form"));
    b.type_into("#profile-name", "Renamed User");
    b.click("#profile-locale option[value=fr]");
    b.click("#profile-submit");
    b.wait("the new name", STEP, |b| {
        b.text("#who").contains("Renamed User")
    });

    // A new address: nothing changes until the mailed link is followed.
    let new = common::unique_email();
    b.type_into("#email-new", &new);
    b.click("#email-submit");
    b.wait("the link notice", STEP, |b| {
        b.text("#notice").contains("new address")
    });
    assert!(b.text("#who").contains(&email));
    b.goto(&server.mailed_link(&new, "change-email"));
    b.wait("the confirm button", STEP, |b| {
        b.displayed("#change-email-submit")
    });
    b.click("#change-email-submit");
    b.wait("the new address", STEP, |b| {
        b.text("#notice").contains("new address") && b.text("#who").contains(&new)
    });
    assert_eq!(b.text("#message"), "");

    // The export, in the page: the new address, no hash.
    b.click("#export");
    b.wait("the export", STEP, |b| {
        b.text("#export-data").contains(&new)
    });
    let export = b.text("#export-data");
    assert!(export.contains("\"locale\": \"fr\""), "{export}");
    assert!(!export.contains("$argon2"), "{export}");

    // Deleted: signed out, and the address no longer signs in.
    b.click("#delete-confirm");
    b.click("#delete-submit");
    b.wait("the deletion notice", STEP, |b| {
        b.text("#notice").contains("account is deleted") && b.displayed("#login-form")
    });
    assert_eq!(b.text("#message"), "");
    b.type_into("#login-email", &new);
    b.type_into("#login-password", common::PASSWORD);
    b.click("#login-submit");
    b.wait("the refusal", STEP, |b| {
        b.text("#message").contains("invalid_credentials")
    });
}

fn run_flow(server: &Server, b: &Browser) {
    let email = common::unique_email();
    b.goto(&format!("{}/", server.url));
    b.wait("the signup form", STEP, |b| b.displayed("#signup-form"));

    // Signup through the form: the page must have fetched svc_csrf and sent it as the header.
    b.type_into("#signup-email", &email);
    b.type_into("#signup-name", "Demo User");
    b.type_into("#signup-password", common::PASSWORD);
    b.click("#signup-submit");
    b.wait("the signed-in panel", STEP, |b| {
        b.text("#who").contains(&email)
    });
    assert_eq!(b.text("#mfa-enabled"), "off");

    // The second factor on, from the page: the key as a link, as text and as a QR code.
    let (secret, enabled_at, recovery) = enrol_in_the_page(server, b);

    b.click("#logout");
    b.wait("the login form", STEP, |b| b.displayed("#login-form"));
    b.type_into("#login-email", &email);
    b.type_into("#login-password", common::PASSWORD);
    b.click("#login-submit");
    b.wait("the second-factor form", STEP, |b| b.displayed("#mfa-form"));
    let (code, _) = totp_now(&secret, enabled_at);
    b.type_into("#mfa-code", &code);
    b.click("#mfa-submit");
    b.wait("the signed-in panel after the second factor", STEP, |b| {
        b.text("#who").contains(&email) && b.text("#mfa-enabled") == "on"
    });

    // The stream: `ready` makes the page reload, then a change appears at the top of the list.
    let ready = b.try_wait(STEP, |b| {
        b.text("#stream-status").starts_with("ready: reloaded at ")
    });
    assert!(
        ready,
        "no `ready` from /v1/events within {STEP:?}; the page says {:?} \
         (\"refused\": GET /v1/events answered an error instead of a stream)",
        b.text("#stream-status")
    );
    let org: i64 = b.text("#orgs tr td").parse().expect("an organization id");
    let project = personal_project(org);
    let id = 900_000 + i64::from(std::process::id() % 100_000);
    emit("server", id, "update", project, org);
    let expected: Vec<String> = ["server", &id.to_string(), "update"]
        .iter()
        .map(|s| s.to_string())
        .chain([project.to_string(), org.to_string()])
        .collect();
    b.wait("the change in the list", STEP, |b| {
        let row = b.text("#changes tr");
        let cells: Vec<&str> = row.split_whitespace().skip(1).collect();
        cells == expected
    });

    // The second factor off again, from the page, with a recovery code.
    assert!(!b.displayed("#factor-setup-form"));
    b.type_into("#factor-disable-code", &recovery[0]);
    b.click("#factor-disable");
    b.wait("the second factor off", STEP, |b| {
        b.text("#mfa-enabled") == "off" && b.displayed("#factor-setup-form")
    });
    assert_eq!(b.text("#message"), "");
}

/// Sets the second factor up through the page's own panel and returns the key, the TOTP step
/// used, and the recovery codes the page showed (once).
fn enrol_in_the_page(server: &Server, b: &Browser) -> (Vec<u8>, u64, Vec<String>) {
    b.wait("the set-up form", STEP, |b| {
        b.displayed("#factor-setup-form")
    });
    b.click("#factor-setup");
    b.wait("the offered key", STEP, |b| {
        b.displayed("#factor-enable-form") && !b.text("#factor-secret").is_empty()
    });
    let key = b.text("#factor-secret");
    let uri = b.text("#factor-uri-text");
    assert!(
        uri.starts_with("otpauth://totp/") && uri.contains(&format!("secret={key}")),
        "{uri}"
    );
    assert!(b.displayed("#factor-qr svg"), "no QR code");
    qr_says(b, &uri);
    let secret = consoled::crypto::base32_decode(&key).expect("a base32 key");
    let (code, step) = totp_now(&secret, 0);
    b.type_into("#factor-enable-code", &code);
    b.click("#factor-enable");
    b.wait("the recovery codes", STEP, |b| {
        b.displayed("#factor-codes") && b.text("#mfa-enabled") == "on"
    });
    let recovery: Vec<String> = b
        .text("#recovery-codes")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(recovery.len(), 10, "{recovery:?}");
    assert_eq!(
        b.text("#factor-secret"),
        "",
        "the key leaves the page once enabled"
    );
    // Shown once: stored, they leave the page, and a reload does not bring them back.
    b.click("#factor-codes-done");
    b.wait("the codes gone", STEP, |b| !b.displayed("#factor-codes"));
    assert_eq!(b.text("#recovery-codes"), "");
    b.goto(&format!("{}/", server.url));
    b.wait("the signed-in panel again", STEP, |b| {
        b.text("#mfa-enabled") == "on" && b.displayed("#factor-disable-form")
    });
    assert!(!b.displayed("#factor-codes"));
    assert_eq!(b.text("#recovery-codes"), "");
    (secret, step, recovery)
}

/// The page's QR code decodes to the key URI, when `zbarimg` (Debian's zbar-tools) is there to
/// read the screenshot; the URI and key as text are checked either way.
fn qr_says(b: &Browser, uri: &str) {
    let Ok(probe) = Command::new("zbarimg").arg("--version").output() else {
        eprintln!(
            "e2e: zbarimg is missing (apt-get install zbar-tools): the QR code is not decoded"
        );
        return;
    };
    assert!(probe.status.success());
    let path = screenshot_path("qr.png");
    b.screenshot(&path);
    let out = Command::new("zbarimg")
        .args(["-q", "--raw"])
        .arg(&path)
        .stderr(Stdio::null())
        .output()
        .expect("run zbarimg");
    let decoded = String::from_utf8_lossy(&out.stdout);
    assert_eq!(decoded.trim_end(), uri, "the QR code on the page");
}

/// Teams in the page (issue 32): an owner makes a team and invites an address; the invitation
/// mail's link, opened signed out, signs the invited person up through it (which joins the team);
/// the owner then makes the new member an admin, and the member's page shows it.
#[test]
#[ignore = "needs chromium and chromedriver; run by `make e2e`"]
fn the_demo_page_makes_a_team_accepts_an_invitation_and_changes_a_role() {
    assert!(
        webdriver::available(),
        "chromium or chromedriver is missing: run scripts/e2e-deps.sh (as root) or `make e2e`"
    );
    // As `make run` starts it: mail to files, each mailed link in the log.
    let server = common::binary::Spawned::start(BIN, &[]);
    in_browser("teams.png", |b| teams_flow(&server, b));
}

fn sign_up_in_the_page(b: &Browser, email: &str, name: &str) {
    b.wait("the signup form", STEP, |b| b.displayed("#signup-form"));
    b.type_into("#signup-email", email);
    b.type_into("#signup-name", name);
    b.type_into("#signup-password", common::PASSWORD);
    b.click("#signup-submit");
    b.wait("the signed-in panel", STEP, |b| {
        b.text("#who").contains(email)
    });
}

fn teams_flow(server: &common::binary::Spawned, b: &Browser) {
    let (owner, invited) = (common::unique_email(), common::unique_email());
    b.goto(&format!("{}/", server.url));
    sign_up_in_the_page(b, &owner, "Team Owner");
    b.type_into("#team-name", "E2E Team");
    b.click("#team-submit");
    b.wait("the new team with its owner", STEP, |b| {
        b.text("#team-org")
            .contains("E2E Team (team, owner, active)")
            && b.text("#members").contains(&owner)
            && b.displayed("#invite-form")
    });
    b.type_into("#invite-email", &invited);
    b.click("#invite-submit");
    b.wait("the open invitation", STEP, |b| {
        b.text("#invitations").contains(&invited)
    });
    // The invited person opens the mailed link signed out and signs up through it.
    b.click("#logout");
    b.wait("the login form", STEP, |b| b.displayed("#login-form"));
    b.goto(&server.mailed_link(&invited, "invitation"));
    b.wait("the invitation step", STEP, |b| {
        b.displayed("#invitation") && b.text("#invitation-note").contains("Sign up")
    });
    sign_up_in_the_page(b, &invited, "Invited Person");
    b.wait("the team joined as member", STEP, |b| {
        b.text("#orgs").contains("E2E Team") && b.text("#orgs").contains("member")
    });
    assert_eq!(
        b.text("#verified"),
        "yes",
        "the invitation proved the address"
    );
    assert!(!b.displayed("#invite-form"), "a member does not invite");

    // The owner makes the new member an admin.
    b.click("#logout");
    b.wait("the login form", STEP, |b| b.displayed("#login-form"));
    b.type_into("#login-email", &owner);
    b.type_into("#login-password", common::PASSWORD);
    b.click("#login-submit");
    b.wait("the team's members", STEP, |b| {
        b.text("#members").contains(&invited)
    });
    let ids = common::db()
        .query_one(
            "SELECT m.org_id, m.user_id FROM memberships m JOIN users u ON u.id = m.user_id
              JOIN organizations o ON o.id = m.org_id WHERE u.email = $1 AND o.kind = 'team'",
            &[&invited],
        )
        .unwrap();
    let (org_id, member_id): (i64, i64) = (ids.get(0), ids.get(1));
    b.click(&format!("#role-{member_id} option[value=admin]"));
    b.click(&format!("#role-change-{member_id}"));
    b.wait("the role changed", STEP, |b| {
        b.text("#notice").contains("is admin now")
    });
    assert_eq!(b.text("#message"), "");
    let role: String = common::db()
        .query_one(
            "SELECT role FROM memberships WHERE org_id = $1 AND user_id = $2",
            &[&org_id, &member_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(role, "admin");
}

/// An eleventh stream of one user in the browser: the page says it waits for a free slot (the
/// server answered `event: refused` with `retry`, which an `EventSource` survives), and streams
/// by itself once another of the user's streams closes; no reload of the page.
#[test]
#[ignore = "needs chromium and chromedriver; run by `make e2e`"]
fn an_eleventh_stream_waits_for_a_free_slot_then_streams() {
    assert!(
        webdriver::available(),
        "chromium or chromedriver is missing: run scripts/e2e-deps.sh (as root) or `make e2e`"
    );
    let server = Server::start();
    let addr: std::net::SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    // The user holds ten streams elsewhere (another session of the same user).
    let mut api = common::Client::new(addr);
    let (email, _) = api.signup();
    let cookie = format!("svc_session={}", api.cookies["svc_session"]);
    let mut held: Vec<common::sse::Sse> = (0..10)
        .map(|_| {
            let mut s = common::sse::open(addr, &[("Cookie", &cookie)]);
            assert_eq!(s.next(STEP), common::sse::Ev::Ready);
            s
        })
        .collect();
    in_browser("waiting.png", |b| {
        b.goto(&format!("{}/", server.url));
        b.wait("the login form", STEP, |b| b.displayed("#login-form"));
        b.type_into("#login-email", &email);
        b.type_into("#login-password", common::PASSWORD);
        b.click("#login-submit");
        b.wait("the page waiting for a free slot", STEP, |b| {
            b.text("#stream-status")
                .starts_with("stream: waiting for a free slot (too_many_streams)")
        });
        // Still waiting a retry later: the browser kept trying, it did not give up.
        std::thread::sleep(Duration::from_secs(4));
        assert!(
            b.text("#stream-status").starts_with("stream: waiting"),
            "{}",
            b.text("#stream-status")
        );
        held.pop();
        b.wait("the stream once a slot freed", STEP, |b| {
            b.text("#stream-status").starts_with("ready: reloaded at ")
        });
    });
}
