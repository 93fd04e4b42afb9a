//! Email verification and password reset: `POST /auth/verify-email`, `/auth/verify-email/resend`,
//! `/auth/password/forgot` and `/auth/password/reset`.
//!
//! Handlers only queue mails (`outbox`) in their transaction; the sender thread mints the link
//! tokens and talks to the mail server (src/mail.rs), so no request waits on SMTP.

use super::Event;
use crate::admission::{BudgetError, Budgets};
use crate::app::{App, Reply};
use crate::db::mail_tokens::{self, Live, Purpose};
use crate::db::{self, outbox, rate, sessions, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::{Email, Fields, Password};
use crate::http::{Request, Response};
use crate::limits::Bucket;

fn invalid_token() -> ApiError {
    ApiError::new(Code::InvalidToken)
}

/// The `token` field; anything that cannot be one of our tokens is refused without a query.
pub(super) fn token_field(fields: &Fields) -> ApiResult<&str> {
    let token = fields.string("token")?;
    if !super::is_token_shaped(token) {
        return Err(invalid_token());
    }
    Ok(token)
}

/// `POST /auth/verify-email {token}`: marks the address the link was sent to as verified.
pub fn verify(app: &App, req: &Request) -> ApiResult<Reply> {
    let fields = Fields::parse(&req.body)?;
    let token = token_field(&fields)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let Some(live) = mail_tokens::consume(&mut tx, token, Purpose::VerifyEmail)? else {
        // A link opened again: say so, so that the page can tell the user it is done.
        if mail_tokens::was_used(&mut tx, token, Purpose::VerifyEmail)? {
            return Err(invalid_token()
                .message("This link was used already.")
                .with_details(serde_json::json!({ "field": "token", "rule": "used already" })));
        }
        return Err(invalid_token());
    };
    let user_id = owner(&mut tx, &live)?;
    // The users trigger announces the `user` change when the flag flips.
    super::prove_address(&mut tx, user_id, None)?;
    tx.commit()?;
    super::audit(app, req, Event::EmailVerified, Some(user_id), &[]);
    Ok(Response::empty(204).into())
}

/// The user of a token, if the account still has the address the token was sent to.
fn owner(c: &mut impl crate::db::Sql, live: &Live) -> ApiResult<i64> {
    match users::find(c, live.user_id)? {
        Some(user) if user.email == live.email => Ok(user.id),
        _ => Err(invalid_token()),
    }
}

/// `POST /auth/verify-email/resend`: queues a fresh verification mail, rate limited per user.
pub fn resend(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let user =
        users::find(&mut tx, session.user_id)?.ok_or_else(|| ApiError::new(Code::Unauthorized))?;
    if user.email_verified {
        return Ok(Response::empty(204).into());
    }
    let buckets = [
        Bucket::VerifyMailsPerMinute(user.id),
        Bucket::VerifyMailsPerDay(user.id),
    ];
    Budgets::new(&app.config.limits).require_room_locked(&mut tx, &buckets)?;
    for bucket in &buckets {
        rate::record(&mut tx, bucket)?;
    }
    outbox::enqueue(&mut tx, "verify_email", user.id, &user.email)?;
    tx.commit()?;
    log::info!("verification mail queued user_id={}", user.id);
    Ok(Response::empty(204).into())
}

/// `POST /auth/password/forgot {email}`: 204 whatever the address. The request never looks
/// the address up: it counts and queues in the same way for every address, and the sender
/// thread drops the row of an address without an account. So the answer and its timing are the
/// same; nothing is hashed and no mail is sent inline.
///
/// Limits: 3 mails per (address, client) and 20 per client an hour. A request past either is
/// dropped silently and writes nothing, so one client adds at most 40 rate rows and 20 outbox
/// rows an hour whatever it sends, and a stranger's requests never use up the owner's.
pub fn forgot(app: &App, req: &Request) -> ApiResult<Reply> {
    let fields = Fields::parse(&req.body)?;
    let email = Email::parse(fields.string("email")?)?;
    let client = req.client(&app.config.client_source);
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let buckets = [
        Bucket::ResetMailClient(client),
        Bucket::ResetMailAddressClient(&email, client),
    ];
    for bucket in &buckets {
        rate::lock(&mut tx, &bucket.key())?;
    }
    // Past a cap the request is dropped silently, whether the address has an account or not.
    let queued = match Budgets::new(&app.config.limits).require_room(&mut tx, &buckets) {
        Ok(()) => true,
        Err(BudgetError::Spent(_)) => false,
        Err(BudgetError::Db(e)) => return Err(e.into()),
    };
    if queued {
        rate::record_all(&mut tx, &buckets)?;
        outbox::enqueue_for_address(&mut tx, "password_reset", email.as_str())?;
    }
    tx.commit()?;
    // Neither the address nor whether it has an account: the request never looks it up. One
    // dropped past a cap is a refusal, and costs no line.
    if queued {
        super::audit(app, req, Event::PasswordResetRequested, None, &[]);
    }
    Ok(Response::empty(204).into())
}

/// `POST /auth/password/reset {token, password}`: replaces the password, marks the address
/// verified (removing what a stranger may have enrolled before: `take_over_address`) and ends
/// every session of the user. It never signs anyone in.
pub fn reset(app: &App, req: &Request) -> ApiResult<Reply> {
    let fields = Fields::parse(&req.body)?;
    let token = token_field(&fields)?;
    let password = Password::parse(fields.string("password")?, "password")?;
    super::passwords::refuse_common(&password, "password")?;
    let client = req.client(&app.config.client_source);
    app.hasher.would_admit(client)?;
    {
        // A cheap look first, so that a wrong token costs no password hash; it also names the
        // account, whose address and name the new password must not be.
        let mut c = db::conn(&app.pool)?;
        let live = mail_tokens::find_live(&mut *c, token, Purpose::PasswordReset)?
            .ok_or_else(invalid_token)?;
        let user = users::find(&mut *c, live.user_id)?.ok_or_else(invalid_token)?;
        // A reset would lead back in: a disabled account is refused here, before the hash
        // (a sign-in after it would be refused anyway: `auth::create_session_cookie`).
        if user.disabled_at.is_some() {
            let route = [("route", req.path.as_str().into())];
            super::audit(app, req, Event::SigninRefused, Some(user.id), &route);
            return Err(ApiError::new(Code::AccountDisabled));
        }
        super::passwords::refuse_personal(&password, "password", &user.email, &user.name)?;
    }
    // No connection is held while hashing.
    let hash = app.hasher.hash(client, password.as_str())?;

    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    // Using the token is the atomic step: of two concurrent resets with one token, one wins.
    let live =
        mail_tokens::consume(&mut tx, token, Purpose::PasswordReset)?.ok_or_else(invalid_token)?;
    let user_id = owner(&mut tx, &live)?;
    users::set_password(&mut tx, user_id, &hash)?;
    super::take_over_address(&mut tx, user_id, None)?;
    mail_tokens::void_unused(&mut tx, user_id, Purpose::PasswordReset)?;
    // Deleting the sessions also ends their event streams (trigger).
    let ended = sessions::delete_for_user(&mut tx, user_id, None)?;
    // The failed sign-ins guarded the old password; they must not lock out the new one.
    super::login::clear_failures(&mut tx, &Email::normalise(&live.email))?;
    tx.commit()?;
    let ended = ("sessions_ended", ended.into());
    super::audit(app, req, Event::PasswordReset, Some(user_id), &[ended]);
    Ok(Response::empty(204)
        .header("Set-Cookie", super::clear_session_cookie(app))
        .into())
}
