//! `POST /auth/signup`: the user, a personal organization with the user as owner, its `default`
//! project, a session and the verification mail, all in one transaction.

use crate::admission::Budgets;
use crate::app::{App, Reply};
use crate::db::{self, orgs, outbox, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::{parse_name, Email, Fields, Password};
use crate::http::Request;
use crate::limits::Bucket;

pub fn post(app: &App, req: &Request) -> ApiResult<Reply> {
    let fields = Fields::parse(&req.body)?;
    let email = Email::parse(fields.string("email")?)?;
    super::oauth::policy::password_allowed(&app.config, &email)?;
    let password = Password::parse(fields.string("password")?, "password")?;
    let name = parse_name(fields.string("name")?)?;
    // Before any count or hash: a refused password costs nothing.
    super::passwords::check(&password, "password", email.as_str(), &name)?;

    // Count the attempt before the expensive hash, in its own short transaction.
    let client = req.client(&app.config.client_source);
    app.hasher.check(client)?;
    {
        let mut c = db::conn(&app.pool)?;
        let mut tx = c.transaction()?;
        let bucket = Bucket::Signup(client);
        Budgets::new(&app.config.limits).take(&mut tx, &bucket)?;
        tx.commit()?;
    }
    // No connection is held while hashing: a slow hash queue must not drain the pool.
    let hash = app.hasher.hash(client, password.as_str())?;

    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let user = users::insert(&mut tx, &email, &name, Some(&hash), false)?
        .ok_or_else(|| ApiError::new(Code::EmailTaken))?;
    orgs::create_personal(&mut tx, user.id, &name)?;
    outbox::enqueue(&mut tx, "verify_email", user.id, &user.email)?;
    let response = super::start_session(app, req, &mut tx, 201, &user, false)?;
    tx.commit()?;
    super::audit(app, req, super::Event::Signup, Some(user.id), &[]);
    Ok(response.into())
}
