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

mod notices;
mod sender;
mod templates;
mod transport;

pub use sender::start;
pub use transport::Mailer;
