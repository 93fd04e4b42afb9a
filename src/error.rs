//! The one error type of request handling, and the one place it becomes a status and a body.
//!
//! Every error carries a message for the user and, separately, a detail for the log. The detail
//! never reaches the client; neither ever contains a secret.

use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidInput,
    InvalidToken,
    Unauthorized,
    InvalidCredentials,
    InvalidCode,
    MfaRequired,
    CsrfInvalid,
    ReauthRequired,
    Forbidden,
    SsoRequired,
    SignupClosed,
    DomainNotAllowed,
    NotFound,
    MethodNotAllowed,
    EmailTaken,
    NameTaken,
    AlreadyMember,
    LastOwner,
    TooManyTokens,
    PayloadTooLarge,
    UnsupportedMediaType,
    HeaderTooLarge,
    RequestTimeout,
    RateLimited,
    TooManyStreams,
    Internal,
    Unavailable,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidInput => "invalid_input",
            Code::InvalidToken => "invalid_token",
            Code::Unauthorized => "unauthorized",
            Code::InvalidCredentials => "invalid_credentials",
            Code::InvalidCode => "invalid_code",
            Code::MfaRequired => "mfa_required",
            Code::CsrfInvalid => "csrf_invalid",
            Code::ReauthRequired => "reauth_required",
            Code::Forbidden => "forbidden",
            Code::SsoRequired => "sso_required",
            Code::SignupClosed => "signup_closed",
            Code::DomainNotAllowed => "domain_not_allowed",
            Code::NotFound => "not_found",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::EmailTaken => "email_taken",
            Code::NameTaken => "name_taken",
            Code::AlreadyMember => "already_member",
            Code::LastOwner => "last_owner",
            Code::TooManyTokens => "too_many_tokens",
            Code::PayloadTooLarge => "payload_too_large",
            Code::UnsupportedMediaType => "unsupported_media_type",
            Code::HeaderTooLarge => "header_too_large",
            Code::RequestTimeout => "request_timeout",
            Code::RateLimited => "rate_limited",
            Code::TooManyStreams => "too_many_streams",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            Code::InvalidInput | Code::InvalidToken => 400,
            Code::Unauthorized
            | Code::InvalidCredentials
            | Code::InvalidCode
            | Code::MfaRequired => 401,
            Code::CsrfInvalid
            | Code::ReauthRequired
            | Code::Forbidden
            | Code::SsoRequired
            | Code::SignupClosed
            | Code::DomainNotAllowed => 403,
            Code::NotFound => 404,
            Code::MethodNotAllowed => 405,
            Code::EmailTaken
            | Code::NameTaken
            | Code::AlreadyMember
            | Code::LastOwner
            | Code::TooManyTokens => 409,
            Code::PayloadTooLarge => 413,
            Code::UnsupportedMediaType => 415,
            Code::HeaderTooLarge => 431,
            Code::RequestTimeout => 408,
            Code::RateLimited | Code::TooManyStreams => 429,
            Code::Internal => 500,
            Code::Unavailable => 503,
        }
    }

    fn default_message(self) -> &'static str {
        match self {
            Code::InvalidInput => "The request is not valid.",
            Code::InvalidToken => "The link is invalid, used or expired.",
            Code::Unauthorized => "Sign in first.",
            Code::InvalidCredentials => "Wrong email or password.",
            Code::InvalidCode => "The code is not valid.",
            Code::MfaRequired => "Enter the code from your authenticator app first.",
            Code::CsrfInvalid => "Missing or invalid CSRF token; call GET /auth/csrf first.",
            Code::ReauthRequired => {
                "Confirm it is you: send your current password, or sign in again."
            }
            Code::Forbidden => "Your role in this organization does not allow this.",
            Code::SsoRequired => {
                "This address signs in only through its organization's identity provider."
            }
            Code::SignupClosed => "Sign-up is closed on this service.",
            Code::DomainNotAllowed => "Accounts of this email domain cannot be made here.",
            Code::NotFound => "Not found.",
            Code::MethodNotAllowed => "Method not allowed.",
            Code::EmailTaken => "An account with this email address exists already.",
            Code::NameTaken => "This name is taken in the organization.",
            Code::AlreadyMember => "This person is a member of the organization already.",
            Code::LastOwner => "An organization keeps at least one owner.",
            Code::TooManyTokens => {
                "The project has as many API tokens as it may; revoke one first."
            }
            Code::PayloadTooLarge => "The request body is larger than 64 KiB.",
            Code::UnsupportedMediaType => "The request body must be application/json.",
            Code::HeaderTooLarge => "The request head is too large.",
            Code::RequestTimeout => "The request body arrived too slowly.",
            Code::RateLimited => "Too many requests; try again later.",
            Code::TooManyStreams => "Too many open event streams.",
            Code::Internal => "Internal error.",
            Code::Unavailable => "The service is temporarily unavailable; try again shortly.",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: Code,
    /// Seconds, for `Retry-After` (429 and 503).
    pub retry_after: Option<u64>,
    /// Boxed: errors travel through every `Result` of a request and should stay small.
    pub more: Box<More>,
}

#[derive(Debug, Clone)]
pub struct More {
    pub message: String,
    pub details: Option<Value>,
    /// `Allow` header value for 405.
    pub allow: Option<String>,
    /// What the operator needs to know; logged, never sent.
    pub log_detail: Option<String>,
    /// `Set-Cookie` values the answer carries (a refused request that must also drop the
    /// browser's session cookie, and then gets a new CSRF cookie: `auth::csrf::follow_session`).
    pub set_cookies: Vec<String>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: Code) -> ApiError {
        ApiError {
            code,
            retry_after: match code {
                Code::Unavailable => Some(5),
                _ => None,
            },
            more: Box::new(More {
                message: code.default_message().to_string(),
                details: None,
                allow: None,
                log_detail: None,
                set_cookies: Vec::new(),
            }),
        }
    }

    pub fn message(mut self, message: impl Into<String>) -> ApiError {
        self.more.message = message.into();
        self
    }

    /// 400 `invalid_input` naming the field and the broken rule.
    pub fn invalid(field: &str, rule: &str) -> ApiError {
        ApiError::new(Code::InvalidInput)
            .message(format!("{field}: {rule}"))
            .with_details(json!({ "field": field, "rule": rule }))
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.more.details = Some(details);
        self
    }

    pub fn rate_limited(retry_after_secs: u64) -> ApiError {
        let mut e = ApiError::new(Code::RateLimited);
        e.retry_after = Some(retry_after_secs.max(1));
        e
    }

    /// The answer also sets this cookie (`Set-Cookie` value).
    pub fn with_cookie(mut self, set_cookie: String) -> ApiError {
        self.more.set_cookies.push(set_cookie);
        self
    }

    pub fn method_not_allowed(allow: &[&str]) -> ApiError {
        let mut e = ApiError::new(Code::MethodNotAllowed);
        e.more.allow = Some(allow.join(", "));
        e
    }

    pub fn internal(detail: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(Code::Internal);
        e.more.log_detail = Some(detail.into());
        e
    }

    pub fn unavailable(detail: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(Code::Unavailable);
        e.more.log_detail = Some(detail.into());
        e
    }

    pub fn body(&self) -> Value {
        let mut error = json!({ "code": self.code.as_str(), "message": self.more.message });
        if let Some(details) = &self.more.details {
            error["details"] = details.clone();
        }
        json!({ "error": error })
    }
}

/// Database errors: a lost or unreachable database, or one that takes no writes now (a failover
/// under way), is 503 `unavailable`; anything else is a bug.
impl From<postgres::Error> for ApiError {
    fn from(e: postgres::Error) -> ApiError {
        if is_connectivity(&e) || is_read_only(&e) {
            ApiError::unavailable(format!("database: {e}"))
        } else {
            ApiError::internal(format!("database: {e}"))
        }
    }
}

impl From<r2d2::Error> for ApiError {
    fn from(e: r2d2::Error) -> ApiError {
        ApiError::unavailable(format!("database pool: {e}"))
    }
}

/// True when the server refused a write as read-only (SQLSTATE 25006): a standby, or a primary
/// demoted or fenced during a failover. The pool drops such a connection (`db::sql`).
pub fn is_read_only(e: &postgres::Error) -> bool {
    e.code() == Some(&postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
}

/// True when the error means "the database is not there" rather than "the query is wrong".
pub fn is_connectivity(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        // 08: connection exception; 57P0x: admin/crash shutdown, cannot connect now;
        // 57014: statement timeout (a stalled database); 53: insufficient resources.
        return code.starts_with("08")
            || code.starts_with("57P")
            || code == "57014"
            || code.starts_with("53");
    }
    // No SQLSTATE: an I/O failure on the connection is connectivity; a conversion error is a bug.
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}
