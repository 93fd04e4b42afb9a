//! The second factor (docs/API.md): `POST /auth/mfa/totp`, which completes a pending session,
//! and the enrolment additions `setup`, `enable`, `disable` and `recovery-codes`.
//!
//! Every accepted code is consumed inside the transaction that acts on it: a TOTP code by raising
//! `users.totp_last_step`, a recovery code by setting its `used_at`. Both are conditional UPDATEs,
//! so of two concurrent submissions of one code exactly one wins. Wrong codes count per pending
//! session (5 revoke it) and per user across sessions and endpoints (20 an hour, then 429).
//!
//! Enrolment changes need proof that the owner is present (`reauth`) before anything else, and
//! each one that changes the account (enable, disable, new recovery codes) mails the owner. Setup
//! only offers a secret, which does nothing until `enable` confirms it.
//!
//! Secrets are stored sealed under the data key (`keys`) and opened only to check a TOTP code.

use crate::admission::Budgets;
use crate::db::{Sql, Tx as Transaction};
use serde_json::{json, Value};

use super::Event;
use crate::app::{App, Reply};
use crate::crypto;
use crate::db::sessions::{self, Session};
use crate::db::{self, outbox, rate, recovery_codes, totp};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::{percent_encode, Request, Response};
use crate::limits::{Bucket, Limits};

use super::factor::Factor;

/// Issuer shown by authenticator apps, and the label prefix of the otpauth URI.
const ISSUER: &str = "consoled";
const RECOVERY_CODES: usize = 10;
const WRONG_CODES_PER_SESSION: i32 = 5;

/// `POST /auth/mfa/totp`: a valid TOTP or unused recovery code turns the pending session into a
/// full one under a new token.
pub fn complete(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::any_session(app, req)?;
    if !session.mfa_pending {
        // Chosen: 400. The caller is signed in, so 401 would tell it to sign in again, and
        // answering 200 without checking the code would hide a client bug.
        return Err(ApiError::invalid("session", "already fully authenticated"));
    }
    let factor = Factor::from_body(req)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    check_cap(&mut tx, &app.config.limits, session.user_id)?;
    if !sessions::lock_pending(&mut tx, session.id)? {
        // Completed, revoked or expired by a concurrent request.
        return Err(ApiError::new(Code::Unauthorized));
    }
    let secret = totp::secrets(&mut tx, session.user_id)?.enabled;
    let ok = match &secret {
        Some(secret) => consume(app, &mut tx, session.user_id, secret, &factor)?,
        None => false,
    };
    if !ok {
        return wrong_code_on_pending(app, req, tx, &session);
    }
    sessions::delete(&mut tx, session.id)?;
    let user = super::session_user(&mut tx, session.user_id)?;
    let response = super::start_session(app, req, &mut tx, 200, &user, false)?;
    tx.commit()?;
    let how = [("factor", factor.name().into())];
    super::audit(app, req, Event::SecondFactorSucceeded, Some(user.id), &how);
    Ok(response.into())
}

/// Counts a wrong code on a pending session; the fifth revokes it (still 401 `invalid_code`,
/// and the browser is told to drop the dead cookie).
fn wrong_code_on_pending(
    app: &App,
    req: &Request,
    mut tx: Transaction,
    session: &Session,
) -> ApiResult<Reply> {
    rate::record(&mut tx, &cap_bucket(session.user_id))?;
    let failed = sessions::add_failed_code(&mut tx, session.id)?;
    let revoked = failed >= WRONG_CODES_PER_SESSION;
    if revoked {
        sessions::delete(&mut tx, session.id)?;
    }
    tx.commit()?;
    let fields = [("failed", failed.into()), ("revoked", revoked.into())];
    let id = Some(session.user_id);
    super::audit(app, req, Event::SecondFactorFailed, id, &fields);
    let e = ApiError::new(Code::InvalidCode);
    if !revoked {
        return Err(e);
    }
    Err(e
        .message("The code is not valid. Too many wrong codes: sign in again.")
        .with_cookie(super::clear_session_cookie(app)))
}

/// `POST /auth/mfa/totp/setup`: offers a new secret; it takes effect when `enable` confirms it.
pub fn setup(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    super::reauth::require(app, req, &session)?;
    let mut c = db::conn(&app.pool)?;
    let user = super::session_user(&mut *c, session.user_id)?;
    let secret = crypto::random_bytes::<20>();
    if !totp::offer(&mut *c, user.id, &app.data_keys.seal_totp(user.id, &secret))? {
        return Err(already_enabled());
    }
    let secret = crypto::base32_encode(&secret);
    let body = json!({ "otpauth_uri": otpauth_uri(&user.email, &secret), "secret": secret });
    Ok(Response::json(200, &body).into())
}

/// The key URI authenticator apps read (Google Authenticator's Key Uri Format).
fn otpauth_uri(email: &str, secret: &str) -> String {
    let issuer = percent_encode(ISSUER);
    format!(
        "otpauth://totp/{issuer}:{}?secret={secret}&issuer={issuer}&algorithm=SHA1&digits=6&period=30",
        percent_encode(email)
    )
}

/// `POST /auth/mfa/totp/enable {code}`: confirms the offered secret with a current code.
pub fn enable(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    super::reauth::require(app, req, &session)?;
    let Factor::Totp(code) = Factor::from_body(req)? else {
        return Err(ApiError::invalid(
            "code",
            "6 digits from the authenticator app",
        ));
    };
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    check_cap(&mut tx, &app.config.limits, session.user_id)?;
    let secrets = totp::secrets(&mut tx, session.user_id)?;
    if secrets.enabled.is_some() {
        return Err(already_enabled());
    }
    let offered = secrets
        .pending
        .ok_or_else(|| ApiError::invalid("code", "call /auth/mfa/totp/setup first"))?;
    let secret = open(app, session.user_id, &offered)?;
    let enabled = match crypto::totp_match(&secret, &code, crypto::unix_now()) {
        Some(step) => totp::enable(&mut tx, session.user_id, &offered, step)?,
        None => false,
    };
    if !enabled {
        return Err(wrong_code(app, req, tx, session.user_id));
    }
    let codes = issue_recovery_codes(&mut tx, session.user_id)?;
    let cookie = notify_and_end_other_sessions(app, &mut tx, &session, "mfa_enabled")?;
    tx.commit()?;
    super::audit(app, req, Event::MfaEnabled, Some(session.user_id), &[]);
    Ok(Response::json(200, &json!({ "recovery_codes": codes }))
        .header("Set-Cookie", cookie)
        .into())
}

/// `POST /auth/mfa/totp/disable {code}` (TOTP or recovery code).
pub fn disable(app: &App, req: &Request) -> ApiResult<Reply> {
    let (reply, user_id) = with_enabled_factor(app, req, |tx, session| {
        totp::disable(tx, session.user_id)?;
        recovery_codes::delete_for_user(tx, session.user_id)?;
        let cookie = notify_and_end_other_sessions(app, tx, session, "mfa_disabled")?;
        Ok(Response::empty(204).header("Set-Cookie", cookie).into())
    })?;
    super::audit(app, req, Event::MfaDisabled, Some(user_id), &[]);
    Ok(reply)
}

/// `POST /auth/mfa/recovery-codes {code}` (TOTP or recovery code): new codes, the old ones void.
pub fn regenerate(app: &App, req: &Request) -> ApiResult<Reply> {
    let (reply, user_id) = with_enabled_factor(app, req, |tx, session| {
        let codes = issue_recovery_codes(tx, session.user_id)?;
        let user = super::session_user(tx, session.user_id)?;
        outbox::enqueue(tx, "mfa_recovery_codes", user.id, &user.email)?;
        Ok(Response::json(200, &json!({ "recovery_codes": codes })).into())
    })?;
    super::audit(app, req, Event::RecoveryCodesReplaced, Some(user_id), &[]);
    Ok(reply)
}

/// Runs `act` for a full session whose body carries a valid code of the enabled factor, in the
/// transaction that consumes the code; a wrong code counts toward the hourly cap instead.
/// Returns the reply and the user, once committed.
fn with_enabled_factor(
    app: &App,
    req: &Request,
    act: impl FnOnce(&mut Transaction, &Session) -> ApiResult<Reply>,
) -> ApiResult<(Reply, i64)> {
    let session = super::require_session(app, req)?;
    super::reauth::require(app, req, &session)?;
    let factor = Factor::from_body(req)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    check_cap(&mut tx, &app.config.limits, session.user_id)?;
    let secret = enabled_secret(&mut tx, session.user_id)?;
    if !consume(app, &mut tx, session.user_id, &secret, &factor)? {
        return Err(wrong_code(app, req, tx, session.user_id));
    }
    let reply = act(&mut tx, &session)?;
    tx.commit()?;
    Ok((reply, session.user_id))
}

/// Checks a code against the enabled secret (as stored) and consumes it inside `tx`: false when
/// it is wrong, replayed or used. Only a TOTP code needs the secret opened, so recovery codes
/// still work when it cannot be (a lost data key).
fn consume(
    app: &App,
    tx: &mut impl Sql,
    user_id: i64,
    stored: &[u8],
    factor: &Factor,
) -> ApiResult<bool> {
    Ok(match factor {
        Factor::Totp(code) => {
            match crypto::totp_match(&open(app, user_id, stored)?, code, crypto::unix_now()) {
                Some(step) => totp::claim_step(tx, user_id, step)?,
                None => false,
            }
        }
        Factor::Recovery(code) => recovery_codes::consume(tx, user_id, &crypto::token_hash(code))?,
    })
}

/// A stored secret opened; a secret sealed under a key this process lacks is the operator's
/// problem, not a wrong code: 503, logged, and not counted against the user.
fn open(app: &App, user_id: i64, stored: &[u8]) -> ApiResult<Vec<u8>> {
    app.data_keys.open_totp(user_id, stored).map_err(|e| {
        log::error!("the TOTP secret of user_id={user_id} {e}");
        ApiError::new(Code::Unavailable).message(
            "Authenticator codes cannot be checked now (a server key is missing); use a \
             recovery code, or try again later.",
        )
    })
}

fn cap_bucket(user_id: i64) -> Bucket<'static> {
    Bucket::WrongCodes(user_id)
}

/// 429 while the user has had 20 wrong codes within the hour, whatever this code is. The bucket
/// stays locked until the transaction ends, so concurrent attempts cannot overshoot the cap.
fn check_cap(tx: &mut impl Sql, limits: &Limits, user_id: i64) -> ApiResult<()> {
    Ok(Budgets::new(limits).require_room_locked(tx, &[cap_bucket(user_id)])?)
}

/// A wrong code on an enrolment endpoint: counted toward the user's hourly cap.
/// Counts a wrong code toward the hourly cap; the error to answer (or the database's).
fn wrong_code(app: &App, req: &Request, mut tx: Transaction, user_id: i64) -> ApiError {
    let recorded = rate::record(&mut tx, &cap_bucket(user_id)).and_then(|()| tx.commit());
    if let Err(e) = recorded {
        return e.into();
    }
    let during = [("during", "enrolment".into())];
    super::audit(app, req, Event::SecondFactorFailed, Some(user_id), &during);
    ApiError::new(Code::InvalidCode)
}

fn enabled_secret(tx: &mut impl Sql, user_id: i64) -> ApiResult<Vec<u8>> {
    totp::secrets(tx, user_id)?.enabled.ok_or_else(|| {
        state_error(
            "The second factor is not enabled.",
            json!({ "field": "mfa_enabled", "rule": "must be true" }),
        )
    })
}

/// Chosen: 400 `invalid_input` (the error table has no conflict code for this). Setup while
/// enabled would let a session replace the secret without proving the old factor.
fn already_enabled() -> ApiError {
    state_error(
        "The second factor is already enabled; disable it first.",
        json!({ "field": "mfa_enabled", "rule": "must be false" }),
    )
}

fn state_error(message: &str, details: Value) -> ApiError {
    ApiError::new(Code::InvalidInput)
        .message(message)
        .with_details(details)
}

/// Replaces the user's recovery codes with 10 new ones; returns them for showing once.
fn issue_recovery_codes(tx: &mut impl Sql, user_id: i64) -> ApiResult<Vec<String>> {
    let raw: Vec<String> = (0..RECOVERY_CODES)
        .map(|_| crypto::base32_encode(&crypto::random_bytes::<10>()).to_ascii_lowercase())
        .collect();
    let hashes: Vec<Vec<u8>> = raw.iter().map(|c| crypto::token_hash(c)).collect();
    recovery_codes::replace(tx, user_id, &hashes)?;
    Ok(raw.iter().map(|c| group(c)).collect())
}

/// `abcdefghijklmnop` → `abcd-efgh-ijkl-mnop`, easier to copy by hand.
fn group(code: &str) -> String {
    code.as_bytes()
        .chunks(4)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("-")
}

/// The notification mail and the end of every other session of the user, in `tx`; this session
/// gets a new token (`auth::renew_token`), whose `Set-Cookie` value is returned.
fn notify_and_end_other_sessions(
    app: &App,
    tx: &mut impl Sql,
    session: &Session,
    kind: &str,
) -> ApiResult<String> {
    let user = super::session_user(tx, session.user_id)?;
    outbox::enqueue(tx, kind, user.id, &user.email)?;
    sessions::delete_for_user(tx, user.id, Some(session.id))?;
    super::renew_token(app, tx, session)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_codes_parse_back_to_their_stored_form() {
        let code = group(&crypto::base32_encode(&[0xAB; 10]).to_ascii_lowercase());
        assert_eq!(code.len(), 19);
        assert_eq!(code.matches('-').count(), 3);
        let Factor::Recovery(compact) = Factor::parse(&code.to_uppercase()).unwrap() else {
            panic!("not a recovery code: {code}");
        };
        assert_eq!(compact, code.replace('-', ""));
    }

    #[test]
    fn otpauth_uri_encodes_the_label() {
        assert_eq!(
            otpauth_uri("a+b@example.com", "ABC"),
            "otpauth://totp/consoled:a%2Bb%40example.com?secret=ABC&issuer=consoled\
             &algorithm=SHA1&digits=6&period=30"
        );
    }
}
