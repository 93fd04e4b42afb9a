//! The demo page at `GET /` (only with `CONSOLED_DEMO=true`): one static HTML file showing the
//! flow a console front end implements (CSRF cookie and header, signup, login, second factor,
//! session, and an `EventSource` on `/v1/events`), with the second factor turned on (the key as
//! a link, text and a QR code drawn by `demo/qr.js`; the recovery codes shown once) and off, and
//! the verification mail sent again, teams (an organization made, members invited, their roles
//! changed, projects), and the account (name and locale, a new address, the export, deletion).
//! The same page answers `/verify-email`, `/reset-password`, `/invitation` and `/change-email`,
//! where the mails link to, and there finishes verification (or says that the link was used),
//! sets a new password with the link's token, accepts an invitation (signing up through it when
//! signed out), or makes the address change with the link's token.
//!
//! Its one inline `<script>` and one inline `<style>` carry a fresh random nonce per response, and
//! the Content-Security-Policy allows nothing else: no other script or style, no inline event
//! handlers or `style` attributes, connections only to this origin, no form submission (the page
//! submits with `fetch`; a form that falls back to a plain submit would put the password in a
//! URL), and no framing. A nonce rather than a hash keeps the page editable without recomputing
//! anything; `Cache-Control: no-store` keeps a nonce from being reused from a cache.

use crate::app::{App, Reply};
use crate::auth;
use crate::crypto;
use crate::db::{self, mail_tokens, mail_tokens::Purpose};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::{Request, Response};

const PAGE: &str = include_str!("demo/index.html");
const NONCE_SLOT: &str = "__NONCE__";
/// The page's QR encoder (the second factor's key as a QR code), pasted into its one script.
const QR_SCRIPT: &str = include_str!("demo/qr.js");
const QR_SLOT: &str = "__QR_SCRIPT__";
/// What the server knows of the mailed link the page was opened from (`used`, or nothing).
const LINK_SLOT: &str = "__LINK_STATE__";

pub fn index(app: &App, req: &Request) -> ApiResult<Reply> {
    if !app.config.demo {
        return Err(ApiError::new(Code::NotFound));
    }
    let nonce = crypto::b64url(&crypto::random_bytes::<16>());
    let link = if req.path == "/verify-email" && verification_used(app, req) {
        "used"
    } else {
        ""
    };
    Ok(page(&nonce, link).into())
}

/// Whether the verification link's token was used already: the page then says so rather than
/// offer "Confirm" again. False when it cannot tell (no token, the database away): the page then
/// offers the button, and the answer to it says what became of the link.
fn verification_used(app: &App, req: &Request) -> bool {
    let Some(token) = req
        .query_param("token")
        .filter(|t| auth::is_token_shaped(t))
    else {
        return false;
    };
    let Ok(mut c) = db::conn(&app.pool) else {
        return false;
    };
    mail_tokens::was_used(&mut *c, &token, Purpose::VerifyEmail).unwrap_or(false)
}

fn page(nonce: &str, link: &str) -> Response {
    Response::text(
        200,
        "text/html; charset=utf-8",
        PAGE.replace(QR_SLOT, QR_SCRIPT)
            .replace(LINK_SLOT, link)
            .replace(NONCE_SLOT, nonce),
    )
    .header("Content-Security-Policy", csp(nonce))
    .header("Cache-Control", "no-store")
    .header("Referrer-Policy", "no-referrer")
    .header("X-Frame-Options", "DENY")
}

fn csp(nonce: &str) -> String {
    format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; \
         connect-src 'self'; img-src 'self'; form-action 'none'; frame-ancestors 'none'; \
         base-uri 'none'"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_inline_block_carries_the_nonce() {
        let body = String::from_utf8(page("abc", "").body).unwrap();
        assert!(!body.contains(NONCE_SLOT) && !body.contains(QR_SLOT));
        assert!(!body.contains(LINK_SLOT) && body.contains("<body data-link=\"\">"));
        assert!(body.contains("function qrSvg("));
        assert_eq!(body.matches("<script").count(), 1);
        assert_eq!(body.matches("<style").count(), 1);
        assert!(body.contains("<script nonce=\"abc\">"));
        assert!(body.contains("<style nonce=\"abc\">"));
        // Inline handlers and style attributes would be refused by the policy.
        assert!(!body.contains(" onclick=") && !body.contains(" style="));
    }
}
