//! Mail: the transport (SMTP, or `.eml` files), the templates, and the sender thread that
//! delivers the `outbox` table.
//!
//! Requests never talk to a mail server: they queue a row in their own transaction. The sender
//! thread of every instance claims due rows (`FOR UPDATE SKIP LOCKED`, so no row goes out twice),
//! mints the link token, sends, and deletes the row; the token's hash and the delete commit only
//! after the mail server accepted the mail. A failed send is retried with exponential backoff.
//!
//! `CONSOLED_SMTP_URL`: `smtp://host[:port]` to a loopback host is plain SMTP (a local relay);
//! to any other host it requires STARTTLS unless the URL says `?tls=opportunistic` or
//! `?tls=none`, so credentials and reset links do not cross a network in clear text by mistake.
//! `smtps://` is SMTP inside TLS (port 465 by default). `user:password@` authenticates
//! (percent-encoded). Without a URL, mails are written as `.eml` files into `CONSOLED_MAIL_DIR`.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lettre::message::{Mailbox, MultiPart};
use lettre::{FileTransport, Message, SmtpTransport, Transport as _};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Transaction};

use crate::app::App;
use crate::config::Config;
use crate::db::mail_tokens::{self, Purpose};
use crate::db::{self, outbox, users};
use crate::http::json::Email;

/// Connect, greeting and every command of an SMTP conversation must finish within this.
const SMTP_TIMEOUT: Duration = Duration::from_secs(10);
/// The outbox is checked this often even when no notification arrives.
const POLL: Duration = Duration::from_secs(2);
/// Floor of a wait, so that a due row another instance holds does not make us spin.
const MIN_WAIT: Duration = Duration::from_millis(100);
/// How often a waiting sender looks at the shutdown flag.
const STOP_CHECK: Duration = Duration::from_millis(200);
const RECONNECT: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// A mail the server rejects for good (5xx) is dropped after this many attempts.
const MAX_PERMANENT_FAILURES: i32 = 5;

/// Where mails go, and who they come from.
pub struct Mailer {
    transport: Transport,
    from: Mailbox,
}

enum Transport {
    Smtp(Box<SmtpTransport>),
    Files(FileTransport),
}

impl Mailer {
    /// Checks the mail settings once at start-up: a bad URL or sender is a configuration error.
    pub fn from_config(config: &Config) -> Result<Mailer, String> {
        let from = config
            .mail_from
            .parse()
            .map_err(|e| format!("CONSOLED_MAIL_FROM is not a mail address: {e}"))?;
        let transport = match &config.smtp_url {
            Some(url) => Transport::Smtp(Box::new(smtp_transport(url)?)),
            None => {
                std::fs::create_dir_all(&config.mail_dir)
                    .map_err(|e| format!("cannot create {}: {e}", config.mail_dir.display()))?;
                Transport::Files(FileTransport::new(&config.mail_dir))
            }
        };
        Ok(Mailer { transport, from })
    }

    fn send(&self, to: &str, mail: &Mail) -> Result<(), SendError> {
        let to: Mailbox = to
            .parse()
            .map_err(|e| SendError::permanent(format!("recipient address: {e}")))?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(mail.subject)
            .multipart(MultiPart::alternative_plain_html(mail.text(), mail.html()))
            .map_err(|e| SendError::permanent(format!("building the message: {e}")))?;
        match &self.transport {
            Transport::Smtp(t) => t.send(&message).map(drop).map_err(|e| SendError {
                permanent: e.is_permanent(),
                message: format!("smtp: {e}"),
            }),
            Transport::Files(t) => t
                .send(&message)
                .map(drop)
                .map_err(|e| SendError::transient(format!("mail file: {e}"))),
        }
    }
}

fn smtp_transport(url: &str) -> Result<SmtpTransport, String> {
    // lettre's own error text names neither the password nor the whole URL.
    let builder = SmtpTransport::from_url(&with_tls_default(url))
        .map_err(|e| format!("CONSOLED_SMTP_URL is not usable: {e}"))?;
    Ok(builder.timeout(Some(SMTP_TIMEOUT)).build())
}

/// The URL lettre gets: `smtp://` to a non-loopback host requires STARTTLS unless `tls=` says
/// otherwise; our `tls=none` (plain, explicitly) is lettre's absent parameter.
fn with_tls_default(url: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    let tls = params.iter().find_map(|p| p.strip_prefix("tls="));
    match tls {
        Some("none") => params.retain(|p| *p != "tls=none"),
        None if base.starts_with("smtp://") && !is_loopback(host_of(base)) => {
            params.push("tls=required")
        }
        _ => {}
    }
    if params.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", params.join("&"))
    }
}

/// The host of `scheme://[user[:password]@]host[:port][/path]`.
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = hostport.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    hostport.split(':').next().unwrap_or("")
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[derive(Debug)]
struct SendError {
    /// The server refused the mail itself (5xx); retrying will not help.
    permanent: bool,
    /// For `outbox.last_error` and the log: never a token (the mail is not part of it).
    message: String,
}

impl SendError {
    fn permanent(message: String) -> SendError {
        SendError {
            permanent: true,
            message,
        }
    }

    fn transient(message: String) -> SendError {
        SendError {
            permanent: false,
            message,
        }
    }
}

/// A rendered mail: a few sentences around at most one link.
struct Mail {
    subject: &'static str,
    intro: &'static str,
    link: String,
    outro: &'static str,
}

impl Mail {
    fn text(&self) -> String {
        format!(
            "Hello,\n\n{}\n\n{}\n\n{}\n",
            self.intro, self.link, self.outro
        )
    }

    fn html(&self) -> String {
        let link = html_escape(&self.link);
        format!(
            "<!DOCTYPE html>\n<html><body>\n<p>Hello,</p>\n<p>{}</p>\n<p><a href=\"{link}\">{link}</a></p>\n<p>{}</p>\n</body></html>\n",
            html_escape(self.intro),
            html_escape(self.outro)
        )
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The purpose and console page of the kinds whose mail carries a token.
fn token_kind(kind: &str) -> Option<(Purpose, &'static str)> {
    match kind {
        "verify_email" => Some((Purpose::VerifyEmail, "verify-email")),
        "password_reset" => Some((Purpose::PasswordReset, "reset-password")),
        _ => None,
    }
}

/// The mail of an outbox kind; `link` is the token link for kinds that have one.
fn template(kind: &str, console_url: &str, link: Option<String>) -> Option<Mail> {
    let sign_in = format!("{console_url}/login");
    let mail = match kind {
        "verify_email" => Mail {
            subject: "Confirm your email address",
            intro: "Please confirm the email address of your console account by opening this link:",
            link: link?,
            outro:
                "The link works once and expires in 24 hours. If you did not create an account, \
                    ignore this mail.",
        },
        "password_reset" => Mail {
            subject: "Reset your password",
            intro: "Someone asked to reset the password of your console account. To choose a new \
                    password, open this link:",
            link: link?,
            outro: "The link works once and expires in 1 hour; a newer reset mail replaces it. \
                    Resetting signs out every session. If you did not ask for this, ignore this \
                    mail: your password stays as it is.",
        },
        "mfa_enabled" => Mail {
            subject: "Two-factor sign-in was enabled",
            intro: "Two-factor sign-in was enabled on your console account. If this wasn't you, \
                    reset your password now from the sign-in page:",
            link: sign_in,
            outro: "If it was you, there is nothing to do.",
        },
        "mfa_disabled" => Mail {
            subject: "Two-factor sign-in was disabled",
            intro: "Two-factor sign-in was disabled on your console account. If this wasn't you, \
                    reset your password now from the sign-in page:",
            link: sign_in,
            outro: "If it was you, there is nothing to do.",
        },
        _ => return None,
    };
    Some(mail)
}

/// Starts the sender thread; it ends when `app.stopping` is set.
pub fn start(app: Arc<App>, mailer: Mailer) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name("mail-sender".into())
        .spawn(move || run(&app, &mailer))
        .expect("spawn mail sender thread")
}

fn stopping(app: &App) -> bool {
    app.stopping.load(Ordering::SeqCst)
}

/// Keeps a dedicated database connection (LISTEN needs one; a send holds its row lock for the
/// length of an SMTP conversation, which must not tie up a pooled connection) and reconnects.
fn run(app: &App, mailer: &Mailer) {
    while !stopping(app) {
        let result =
            db::connect(&app.config, "consoled-mail").and_then(|client| serve(app, mailer, client));
        if let Err(e) = result {
            log::warn!("mail sender: {e}; reconnecting");
            pause(app, RECONNECT);
        }
    }
}

fn serve(app: &App, mailer: &Mailer, mut client: Client) -> Result<(), String> {
    let db_err = |e: postgres::Error| format!("database: {e}");
    client
        .batch_execute("LISTEN consoled_outbox")
        .map_err(db_err)?;
    while !stopping(app) {
        while !stopping(app) && deliver_next(app, mailer, &mut client).map_err(db_err)? {}
        let wait = outbox::next_due_in(&mut client)
            .map_err(db_err)?
            .map_or(POLL, |due| due.clamp(MIN_WAIT, POLL));
        wait_for_wakeup(app, &mut client, wait)?;
    }
    Ok(())
}

/// Sleeps until a notification arrives, `wait` passes, or shutdown begins.
fn wait_for_wakeup(app: &App, client: &mut Client, wait: Duration) -> Result<(), String> {
    let deadline = Instant::now() + wait;
    loop {
        let now = Instant::now();
        if now >= deadline || stopping(app) {
            return Ok(());
        }
        let slice = (deadline - now).min(STOP_CHECK);
        let woke = client.notifications().timeout_iter(slice).next();
        match woke {
            Ok(Some(_)) => {
                // One pass over the outbox serves every queued notification.
                let _ = client.notifications().iter().count();
                return Ok(());
            }
            Ok(None) if client.is_closed() => return Err("listener connection lost".into()),
            Ok(None) => {}
            Err(e) => return Err(format!("listener: {e}")),
        }
    }
}

fn pause(app: &App, d: Duration) {
    let deadline = Instant::now() + d;
    while !stopping(app) && Instant::now() < deadline {
        thread::sleep(STOP_CHECK.min(deadline - Instant::now()));
    }
}

enum Outcome {
    Sent,
    /// Nothing to send: an address verified in the meantime, or a reset for an address that
    /// has no account.
    Obsolete,
    Failed(SendError),
}

/// Claims one due row and handles it; `false` when none is due.
fn deliver_next(app: &App, mailer: &Mailer, client: &mut Client) -> Result<bool, postgres::Error> {
    let mut tx = client.transaction()?;
    let Some(due) = outbox::claim_due(&mut tx)? else {
        return Ok(false);
    };
    match attempt(app, mailer, &mut tx, &due)? {
        Outcome::Sent => {
            outbox::delete(&mut tx, due.id)?;
            app.metrics.mails_sent.fetch_add(1, Ordering::Relaxed);
            log::info!("mail sent kind={} outbox_id={}", due.kind, due.id);
        }
        Outcome::Obsolete => {
            outbox::delete(&mut tx, due.id)?;
            log::info!("mail not needed kind={} outbox_id={}", due.kind, due.id);
        }
        Outcome::Failed(e) => failed(app, &mut tx, &due, &e)?,
    }
    tx.commit()?;
    Ok(true)
}

/// Builds and sends the mail of a row. The token is stored in a savepoint that survives only a
/// successful send: a failed attempt leaves no live token behind.
fn attempt(
    app: &App,
    mailer: &Mailer,
    tx: &mut Transaction<'_>,
    due: &outbox::Due,
) -> Result<Outcome, postgres::Error> {
    let user = match due.user_id {
        Some(id) => users::find(tx, id)?,
        // Queued by address (password forgot): the account is looked up only now.
        None => users::find_by_email(tx, &Email::normalise(&due.recipient))?,
    };
    let obsolete = match due.kind.as_str() {
        "verify_email" => user.as_ref().is_none_or(|u| u.email_verified),
        "password_reset" => user.is_none(),
        _ => false,
    };
    if obsolete {
        return Ok(Outcome::Obsolete);
    }
    let mut savepoint = tx.transaction()?;
    let link = match (token_kind(&due.kind), &user) {
        (Some((purpose, page)), Some(user)) => {
            let token = mail_tokens::create(&mut savepoint, user.id, purpose, &due.recipient)?;
            Some(format!("{}/{page}?token={token}", app.config.console_url))
        }
        (Some(_), None) => {
            return Ok(Outcome::Failed(SendError::permanent("no such user".into())));
        }
        (None, _) => None,
    };
    let Some(mail) = template(&due.kind, &app.config.console_url, link) else {
        // Perhaps a newer instance's kind: leave the row for it, with backoff.
        return Ok(Outcome::Failed(SendError::transient(format!(
            "unknown mail kind {:?}",
            due.kind
        ))));
    };
    match mailer.send(&due.recipient, &mail) {
        Ok(()) => {
            savepoint.commit()?;
            Ok(Outcome::Sent)
        }
        Err(e) => Ok(Outcome::Failed(e)),
    }
}

/// Records a failed attempt: retry later, or give up on a mail the server refuses for good.
fn failed(
    app: &App,
    tx: &mut Transaction<'_>,
    due: &outbox::Due,
    e: &SendError,
) -> Result<(), postgres::Error> {
    app.metrics.mail_failures.fetch_add(1, Ordering::Relaxed);
    let message = truncate(&e.message, 500);
    if e.permanent && due.attempts + 1 >= MAX_PERMANENT_FAILURES {
        log::error!(
            "mail dropped kind={} outbox_id={} after {} attempts: {message}",
            due.kind,
            due.id,
            due.attempts + 1
        );
        return outbox::delete(tx, due.id);
    }
    let delay = backoff(app.config.mail_retry, due.attempts);
    log::warn!(
        "mail failed kind={} outbox_id={} attempt={}, retry in {:.1}s: {message}",
        due.kind,
        due.id,
        due.attempts + 1,
        delay.as_secs_f64()
    );
    outbox::defer(tx, due.id, delay, message)
}

/// `first` doubled per earlier attempt, at most 5 minutes.
fn backoff(first: Duration, attempts: i32) -> Duration {
    let factor = 2u32.saturating_pow(attempts.clamp(0, 20) as u32);
    first.saturating_mul(factor).min(MAX_BACKOFF)
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_to_a_remote_host_requires_starttls_by_default() {
        assert_eq!(
            with_tls_default("smtp://mail.example.com"),
            "smtp://mail.example.com?tls=required"
        );
        assert_eq!(
            with_tls_default("smtp://u:p%40ss@mail.example.com:2525"),
            "smtp://u:p%40ss@mail.example.com:2525?tls=required"
        );
        assert_eq!(
            with_tls_default("smtp://mail.example.com?tls=opportunistic"),
            "smtp://mail.example.com?tls=opportunistic"
        );
        assert_eq!(
            with_tls_default("smtp://mail.example.com:25?tls=none"),
            "smtp://mail.example.com:25"
        );
        assert_eq!(
            with_tls_default("smtps://u:p@mail.example.com"),
            "smtps://u:p@mail.example.com"
        );
    }

    #[test]
    fn smtp_to_loopback_is_plain() {
        for url in [
            "smtp://127.0.0.1:2525",
            "smtp://localhost",
            "smtp://[::1]:25",
            "smtp://a:b@127.0.0.1:25",
        ] {
            assert_eq!(with_tls_default(url), url);
        }
    }

    fn config(smtp_url: &str) -> Config {
        let vars = [
            ("DATABASE_URL", "postgres://a@b/c"),
            ("CONSOLED_SMTP_URL", smtp_url),
        ];
        Config::from_vars(
            vars.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn a_bad_smtp_url_is_refused_at_start_without_showing_its_password() {
        for url in [
            "smtp://u:hunter2@[bad",
            "ftp://u:hunter2@host",
            "smtp://u:hunter2@h?tls=maybe",
        ] {
            let err = Mailer::from_config(&config(url)).err().expect(url);
            assert!(
                err.contains("CONSOLED_SMTP_URL") && !err.contains("hunter2"),
                "{err}"
            );
        }
        assert!(Mailer::from_config(&config("smtps://u:p%40ss@mail.example.com")).is_ok());
    }

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        let first = Duration::from_secs(1);
        assert_eq!(backoff(first, 0), Duration::from_secs(1));
        assert_eq!(backoff(first, 1), Duration::from_secs(2));
        assert_eq!(backoff(first, 5), Duration::from_secs(32));
        assert_eq!(backoff(first, 9), MAX_BACKOFF);
        assert_eq!(backoff(first, i32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn every_kind_has_a_template_and_token_kinds_need_their_link() {
        for kind in [
            "verify_email",
            "password_reset",
            "mfa_enabled",
            "mfa_disabled",
        ] {
            let mail = template(
                kind,
                "https://c.example",
                Some("https://c.example/x".into()),
            )
            .unwrap_or_else(|| panic!("{kind}"));
            assert!(mail.text().contains("https://c.example/"), "{kind}");
            assert!(mail.html().contains("<a href="), "{kind}");
        }
        assert!(template("verify_email", "https://c.example", None).is_none());
        assert!(template("mfa_enabled", "https://c.example", None).is_some());
        assert!(template("unknown", "https://c.example", None).is_none());
    }

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("ééé", 2), "éé");
        assert_eq!(truncate("ab", 5), "ab");
    }
}
