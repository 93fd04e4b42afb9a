//! The demo page at `GET /` (only with `CONSOLED_DEMO=true`): one static HTML file showing the
//! flow a console front end implements (CSRF cookie and header, signup, login, second factor,
//! session, and an `EventSource` on `/v1/events`). The same page answers `/verify-email` and
//! `/reset-password`, where the mails link to, and there finishes verification or sets a new
//! password with the link's token.
//!
//! Its one inline `<script>` and one inline `<style>` carry a fresh random nonce per response, and
//! the Content-Security-Policy allows nothing else: no other script or style, no inline event
//! handlers or `style` attributes, connections only to this origin, no form submission (the page
//! submits with `fetch`; a form that falls back to a plain submit would put the password in a
//! URL), and no framing. A nonce rather than a hash keeps the page editable without recomputing
//! anything; `Cache-Control: no-store` keeps a nonce from being reused from a cache.

use crate::app::{App, Reply};
use crate::crypto;
use crate::error::{ApiError, ApiResult, Code};
use crate::http::{Request, Response};

const PAGE: &str = include_str!("demo/index.html");
const NONCE_SLOT: &str = "__NONCE__";
/// The page's QR encoder (the second factor's key as a QR code), pasted into its one script.
const QR_SCRIPT: &str = include_str!("demo/qr.js");
const QR_SLOT: &str = "__QR_SCRIPT__";

pub fn index(app: &App, _req: &Request) -> ApiResult<Reply> {
    if !app.config.demo {
        return Err(ApiError::new(Code::NotFound));
    }
    let nonce = crypto::b64url(&crypto::random_bytes::<16>());
    Ok(page(&nonce).into())
}

fn page(nonce: &str) -> Response {
    Response::text(
        200,
        "text/html; charset=utf-8",
        PAGE.replace(QR_SLOT, QR_SCRIPT).replace(NONCE_SLOT, nonce),
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
        let body = String::from_utf8(page("abc").body).unwrap();
        assert!(!body.contains(NONCE_SLOT) && !body.contains(QR_SLOT));
        assert!(body.contains("function qrSvg("));
        assert_eq!(body.matches("<script").count(), 1);
        assert_eq!(body.matches("<style").count(), 1);
        assert!(body.contains("<script nonce=\"abc\">"));
        assert!(body.contains("<style nonce=\"abc\">"));
        // Inline handlers and style attributes would be refused by the policy.
        assert!(!body.contains(" onclick=") && !body.contains(" style="));
    }
}
