//! The sender thread: claims due `outbox` rows, mints link tokens, delivers, retries with backoff.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Transaction};

use crate::app::App;
use crate::db::mail_tokens::{self};
use crate::db::{self, invitations, outbox, users};
use crate::http::json::Email;

use super::templates::{template, token_kind};
use super::transport::{Mailer, SendError};

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
        let result = db::connect(&app.config, "consoled-mail").and_then(|client| {
            db::health::ok();
            serve(app, mailer, client)
        });
        // Every error here is the database's (delivery errors are handled per mail): one line
        // per outage (`db::health`), not one per attempt.
        if let Err(e) = result {
            db::health::failed("mail sender", &e);
            pause(app, RECONNECT);
        }
    }
}

fn serve(app: &App, mailer: &Mailer, mut client: Client) -> Result<(), String> {
    let db_err = |e: postgres::Error| format!("database: {}", db::health::cause(&e));
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

enum Delivery {
    Sent,
    /// Nothing to send: an address verified in the meantime, a reset for an address that has
    /// no account or a disabled one, an email change made or void meanwhile.
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
        // A reset asked for by address (`forgot`): mailed, or dropped because the address has
        // no account. Which of the two is neither counted nor logged apart (issue 37, item 4):
        // whoever asked must not learn it, through the metrics or anyone who reads the log.
        // (Other mails without a user, an invitation or a notice to an address an account has
        // left, are mails like any other.)
        Delivery::Sent | Delivery::Obsolete
            if due.user_id.is_none() && due.kind == "password_reset" =>
        {
            outbox::delete(&mut tx, due.id)?;
            app.metrics.reset_requests.fetch_add(1, Ordering::Relaxed);
            log::info!(
                "reset request handled kind={} outbox_id={}",
                due.kind,
                due.id
            );
        }
        Delivery::Sent => {
            outbox::delete(&mut tx, due.id)?;
            app.metrics.mails_sent.fetch_add(1, Ordering::Relaxed);
            log::info!("mail sent kind={} outbox_id={}", due.kind, due.id);
        }
        Delivery::Obsolete => {
            outbox::delete(&mut tx, due.id)?;
            log::info!("mail not needed kind={} outbox_id={}", due.kind, due.id);
        }
        Delivery::Failed(e) => failed(app, &mut tx, &due, &e)?,
    }
    tx.commit()?;
    Ok(true)
}

/// A mail ready to send, with its token link (for the development log), or why there is none.
enum Built {
    Ready(super::templates::Mail, Option<String>),
    Obsolete,
    Failed(SendError),
}

/// Builds and sends the mail of a row. The token is stored in a savepoint that survives only a
/// successful send: a failed attempt leaves no live token behind.
fn attempt(
    app: &App,
    mailer: &Mailer,
    tx: &mut Transaction<'_>,
    due: &outbox::Due,
) -> Result<Delivery, postgres::Error> {
    let mut savepoint = tx.transaction()?;
    let built = match due.kind.as_str() {
        "invitation" => invitation_mail(app, &mut savepoint, due)?,
        _ => account_mail(app, mailer, &mut savepoint, due)?,
    };
    let (mail, link) = match built {
        Built::Ready(mail, link) => (mail, link),
        Built::Obsolete => return Ok(Delivery::Obsolete),
        Built::Failed(e) => return Ok(Delivery::Failed(e)),
    };
    // Local development (`make run`): the link, token included, so that nobody decodes a
    // quoted-printable `.eml` by eye. Config refuses this setting together with SMTP.
    let dev_link = link.filter(|_| app.config.mail_log_links);
    match mailer.send(&due.recipient, &mail) {
        Ok(()) => {
            savepoint.commit()?;
            if let Some(link) = dev_link {
                log::info!(
                    "mailed link (CONSOLED_MAIL_LOG_LINKS) kind={} to={}: {link}",
                    due.kind,
                    due.recipient
                );
            }
            Ok(Delivery::Sent)
        }
        Err(e) => Ok(Delivery::Failed(e)),
    }
}

/// The mail a row becomes. An address change to an address that has an account already becomes
/// a note to its owner, without the link: the link is still minted (and never sent), so that
/// nothing the asker can read (the answer, the export's mailed links) tells the two apart.
fn mailed_kind<'a>(
    c: &mut Transaction<'_>,
    due: &'a outbox::Due,
) -> Result<&'a str, postgres::Error> {
    if due.kind == "email_change"
        && users::find_by_email(c, &Email::normalise(&due.recipient))?.is_some()
    {
        return Ok("email_change_taken");
    }
    Ok(&due.kind)
}

/// A mail to an account (or, for a reset, to an address that may have one).
fn account_mail(
    app: &App,
    mailer: &Mailer,
    c: &mut Transaction<'_>,
    due: &outbox::Due,
) -> Result<Built, postgres::Error> {
    let user = match due.user_id {
        Some(id) => users::find(c, id)?,
        // Queued by address (password forgot): the account is looked up only now, once the mail
        // server answers. So an outage fails (counted, logged, retried) the requests of every
        // address alike, not only of those that have an account.
        None => {
            if let Err(e) = mailer.probe() {
                return Ok(Built::Failed(e));
            }
            users::find_by_email(c, &Email::normalise(&due.recipient))?
        }
    };
    if obsolete(due, user.as_ref()) {
        return Ok(Built::Obsolete);
    }
    let kind = mailed_kind(c, due)?;
    let link = match (token_kind(&due.kind), &user) {
        (Some((purpose, page)), Some(user)) => {
            let token = mail_tokens::create(c, user.id, purpose, &due.recipient)?;
            Some(format!("{}/{page}?token={token}", app.config.console_url))
        }
        (Some(_), None) => {
            return Ok(Built::Failed(SendError::permanent("no such user".into())));
        }
        (None, _) => None,
    }
    .filter(|_| kind == due.kind);
    let console = &app.config.console_url;
    Ok(
        match template(kind, console, link.clone(), due.details.as_ref()) {
            Some(mail) => Built::Ready(mail, link),
            // Perhaps a newer instance's kind: leave the row for it, with backoff.
            None => Built::Failed(SendError::transient(format!(
                "unknown mail kind {:?}",
                due.kind
            ))),
        },
    )
}

/// Whether a row's mail is no longer needed: an address verified meanwhile, a reset for an
/// address without an account, an address change made or void meanwhile. A disabled account
/// gets no link that could lead back in.
fn obsolete(due: &outbox::Due, user: Option<&users::User>) -> bool {
    match due.kind.as_str() {
        "verify_email" => user.is_none_or(|u| u.email_verified),
        "password_reset" => user.is_none_or(|u| u.disabled_at.is_some()),
        "email_change" => user.is_none_or(|u| u.disabled_at.is_some() || u.email == due.recipient),
        _ => false,
    }
}

/// An invitation's mail, with a new link token; none once it was used, cancelled or expired.
fn invitation_mail(
    app: &App,
    c: &mut Transaction<'_>,
    due: &outbox::Due,
) -> Result<Built, postgres::Error> {
    let Some(id) = due.invitation_id else {
        return Ok(Built::Failed(SendError::permanent(
            "an invitation mail without its invitation".into(),
        )));
    };
    let Some(invite) = invitations::to_mail(c, id)? else {
        return Ok(Built::Obsolete);
    };
    // Cancelled or replaced since: no mail.
    let Some(token) = invitations::set_token(c, id)? else {
        return Ok(Built::Obsolete);
    };
    let link = format!("{}/invitation?token={token}", app.config.console_url);
    Ok(Built::Ready(
        super::templates::invitation(link.clone(), &invite),
        Some(link),
    ))
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
    fn backoff_doubles_up_to_five_minutes() {
        let first = Duration::from_secs(1);
        assert_eq!(backoff(first, 0), Duration::from_secs(1));
        assert_eq!(backoff(first, 1), Duration::from_secs(2));
        assert_eq!(backoff(first, 5), Duration::from_secs(32));
        assert_eq!(backoff(first, 9), MAX_BACKOFF);
        assert_eq!(backoff(first, i32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("ééé", 2), "éé");
        assert_eq!(truncate("ab", 5), "ab");
    }
}
