//! `POST /auth/signup`: the user, a personal organization with the user as owner, its `default`
//! project, a session and the verification mail, all in one transaction. Who may sign up is
//! `signup_policy`'s decision, asked first. Signing up through an invitation (the mailed link's
//! token in `invitation`) uses the link up, verifies the address (the link proved it: no
//! verification mail) and joins the inviting organization with the invited role.

use crate::access;
use crate::admission::Budgets;
use crate::app::{App, Reply};
use crate::db::invitations::{self, Invitation};
use crate::db::{self, members, orgs, outbox, users, Sql};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::client::Client;
use crate::http::json::{parse_name, Email, Fields, Password};
use crate::http::{Request, Response};
use crate::limits::Bucket;

use super::signup_policy::{self, Evidence};
use super::Event;

pub fn post(app: &App, req: &Request) -> ApiResult<Reply> {
    let fields = Fields::parse(&req.body)?;
    let email = Email::parse(fields.string("email")?)?;
    super::oauth::policy::password_allowed(&app.config, &email)?;
    let password = Password::parse(fields.string("password")?, "password")?;
    let name = parse_name(fields.string("name")?)?;
    let link = fields.optional_string("invitation")?;
    // Before any count or hash: a refused password costs nothing.
    super::passwords::refuse_weak(&password, "password", email.as_str(), &name)?;
    let client = req.client(&app.config.client_source);
    app.hasher.would_admit(client)?;
    let invitation = admit(app, req, &email, link, client)?;
    // No connection is held while hashing: a slow hash queue must not drain the pool.
    let hash = app.hasher.hash(client, password.as_str())?;
    let invited = invitation.is_some();
    let made = create(app, req, (&email, &name, &hash), invitation, link)?;
    let user_id = made.user_id;
    super::audit(
        app,
        req,
        Event::Signup,
        Some(user_id),
        &[("invited", invited.into())],
    );
    if let Some((org_id, invitation)) = made.joined {
        let fields = [
            ("org_id", org_id.into()),
            ("invitation_id", invitation.id.into()),
            ("role", invitation.role.as_str().into()),
            ("via", "signup".into()),
        ];
        super::audit(app, req, Event::InvitationAccepted, Some(user_id), &fields);
    }
    Ok(made.response.into())
}

/// What a sign-up made: the answer, the user, and the team joined through the invitation.
struct SignedUp {
    response: Response,
    user_id: i64,
    joined: Option<(i64, Invitation)>,
}

/// Who may sign up (`signup_policy`), then the attempt counted, before the expensive hash and in
/// its own short transaction; the invitation its link names, if any.
fn admit(
    app: &App,
    req: &Request,
    email: &Email,
    link: Option<&str>,
    client: Client,
) -> ApiResult<Option<Invitation>> {
    let mut c = db::conn(&app.pool)?;
    let admitted = signup_policy::admit(&mut *c, &app.config.signup, email, Evidence::Link(link));
    let invitation = admitted.inspect_err(|e| refused(app, req, e))?;
    let mut tx = c.transaction()?;
    let bucket = Bucket::Signup(client);
    Budgets::new(&app.config.limits).take(&mut tx, &bucket)?;
    tx.commit()?;
    Ok(invitation)
}

/// The user, its personal organization, the invitation's team joined, the verification mail
/// (not when invited: the link proved the address) and the session, in one transaction.
fn create(
    app: &App,
    req: &Request,
    (email, name, hash): (&Email, &str, &str),
    invitation: Option<Invitation>,
    link: Option<&str>,
) -> ApiResult<SignedUp> {
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let invited = invitation.is_some();
    let user = users::insert(&mut tx, email, name, Some(hash), invited)?
        .ok_or_else(|| ApiError::new(Code::EmailTaken))?;
    orgs::create_personal(&mut tx, user.id, name)?;
    let joined = match (invitation, link) {
        (Some(invitation), Some(token)) => join(&mut tx, &invitation, token, user.id)?,
        _ => None,
    };
    if !invited {
        outbox::enqueue(&mut tx, "verify_email", user.id, &user.email)?;
    }
    let response = super::start_session(app, req, &mut tx, 201, &user, false)?;
    tx.commit()?;
    Ok(SignedUp {
        response,
        user_id: user.id,
        joined,
    })
}

/// Uses the invitation's link up for the new user and, when it names an organization (an active
/// team), makes the user a member with the invited role.
fn join(
    tx: &mut impl Sql,
    invitation: &Invitation,
    token: &str,
    user_id: i64,
) -> ApiResult<Option<(i64, Invitation)>> {
    // Used meanwhile by a concurrent sign-up: refused as an unusable link.
    let used = invitations::consume(tx, token, user_id)?
        .filter(|used| used.id == invitation.id)
        .ok_or_else(|| ApiError::invalid("invitation", "unknown, used or expired"))?;
    let Some(org_id) = used.org_id else {
        return Ok(None);
    };
    if let Some((status, personal)) = orgs::status_of(tx, org_id)? {
        access::admits(status, personal).map_err(access::Forbidden::into_error)?;
        members::add(tx, org_id, user_id, used.role)?;
    }
    Ok(Some((org_id, used)))
}

/// A refusal by the sign-up policy is a security event (never the address tried).
fn refused(app: &App, req: &Request, e: &ApiError) {
    if matches!(e.code, Code::SignupClosed | Code::DomainNotAllowed) {
        let fields = [
            ("reason", e.code.as_str().into()),
            ("route", "password".into()),
        ];
        super::audit(app, req, Event::SignupRefused, None, &fields);
    }
}
