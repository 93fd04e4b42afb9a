//! Where mails go: lettre's SMTP transport (plain to loopback, STARTTLS required elsewhere by
//! default, or SMTPS) or `.eml` files.

use std::net::IpAddr;
use std::time::Duration;

use lettre::message::{Mailbox, MultiPart};
use lettre::{FileTransport, Message, SmtpTransport, Transport as _};

use crate::config::Config;

use super::templates::Mail;

/// Connect, greeting and every command of an SMTP conversation must finish within this.
const SMTP_TIMEOUT: Duration = Duration::from_secs(10);

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
        let from = config.mail_from.parse().map_err(|e| {
            format!(
                "CONSOLED_MAIL_FROM={:?} is not valid: expected a mail address such as \
                     console@example.com or \"Console <console@example.com>\" ({e})",
                config.mail_from
            )
        })?;
        let transport = match &config.smtp_url {
            Some(url) => Transport::Smtp(Box::new(smtp_transport(url)?)),
            None => {
                std::fs::create_dir_all(&config.mail_dir).map_err(|e| {
                    format!(
                        "CONSOLED_MAIL_DIR={:?} is not usable: expected a folder this user may \
                         create and write, for mail without CONSOLED_SMTP_URL ({e})",
                        config.mail_dir.display().to_string()
                    )
                })?;
                Transport::Files(FileTransport::new(&config.mail_dir))
            }
        };
        Ok(Mailer { transport, from })
    }

    pub(super) fn send(&self, to: &str, mail: &Mail) -> Result<(), SendError> {
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

impl Mailer {
    /// Whether the mail server takes a conversation now (SMTP: connect, greeting, `NOOP`, `QUIT`;
    /// files: always).
    pub(super) fn probe(&self) -> Result<(), SendError> {
        match &self.transport {
            Transport::Smtp(t) => match t.test_connection() {
                Ok(true) => Ok(()),
                Ok(false) => Err(SendError::transient(
                    "smtp: the server did not answer NOOP".into(),
                )),
                Err(e) => Err(SendError {
                    permanent: e.is_permanent(),
                    message: format!("smtp: {e}"),
                }),
            },
            Transport::Files(_) => Ok(()),
        }
    }
}

fn smtp_transport(url: &str) -> Result<SmtpTransport, String> {
    // lettre's own error text names neither the password nor the whole URL; the URL is shown
    // with its password hidden.
    let builder = SmtpTransport::from_url(&with_tls_default(url)).map_err(|e| {
        format!(
            "CONSOLED_SMTP_URL={:?} is not valid: expected smtp:// or \
             smtps://[user:password@]host[:port][?tls=opportunistic|none] ({e})",
            crate::config::redact_url(url)
        )
    })?;
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
pub(super) struct SendError {
    /// The server refused the mail itself (5xx); retrying will not help.
    pub(super) permanent: bool,
    /// For `outbox.last_error` and the log: never a token (the mail is not part of it).
    pub(super) message: String,
}

impl SendError {
    pub(super) fn permanent(message: String) -> SendError {
        SendError {
            permanent: true,
            message,
        }
    }

    pub(super) fn transient(message: String) -> SendError {
        SendError {
            permanent: false,
            message,
        }
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
}
