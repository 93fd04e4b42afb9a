//! TLS to PostgreSQL on rustls, with libpq's `sslmode` meanings: `disable` (none), `prefer`
//! (TLS when the server offers it, the certificate not checked; the default, as libpq's),
//! `require` (TLS or no connection; the certificate checked against `sslrootcert` when one is
//! given, as libpq does, else not at all), `verify-ca` (a certificate signed by a CA in
//! `sslrootcert`) and `verify-full` (that, and issued for the host connected to). `sslrootcert`
//! is a PEM file or `system` (the operating system's trust store); `sslcert` and `sslkey` are a
//! client certificate and its key.
//!
//! The `postgres` crate takes TLS as a connector (`MakeTlsConnect`); ours is a thin one over
//! tokio-rustls. Its futures and streams only pass the crate's calls through to tokio-rustls:
//! there is no async logic of ours here (README, "Dependencies").

use std::future::Future;
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use postgres::Socket;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use verify::{AnyName, Unchecked};

mod verify;

/// libpq's `sslmode` values (without `allow`, which tries plain text first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    pub fn parse(value: &str) -> Result<Mode, String> {
        Ok(match value {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow is not supported: use prefer (the default), which \
                            tries TLS first, or disable"
                        .into(),
                )
            }
            other => {
                return Err(format!(
                    "sslmode={other:?} is not one of disable, prefer, require, verify-ca, \
                     verify-full"
                ))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }

    /// What the `postgres` crate itself must do: whether TLS is tried, and whether it is a must.
    pub fn pg(self) -> postgres::config::SslMode {
        match self {
            Mode::Disable => postgres::config::SslMode::Disable,
            Mode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        }
    }
}

/// Where trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    File(PathBuf),
    /// The operating system's store (`SSL_CERT_FILE`/`SSL_CERT_DIR`, else /etc/ssl/certs).
    System,
}

/// The TLS parameters of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    pub mode: Mode,
    pub roots: Option<Roots>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            mode: Mode::Prefer,
            roots: None,
            cert: None,
            key: None,
        }
    }
}

/// The connector handed to the `postgres` crate: cheap to clone, made once at start.
#[derive(Clone)]
pub struct Tls {
    config: Arc<ClientConfig>,
    /// verify-full: the name connected to must be the certificate's.
    check_name: bool,
}

/// How the server's certificate is checked.
enum Check {
    /// prefer, and require without sslrootcert: encrypted, but anyone may answer.
    Nothing,
    /// verify-ca (and require with sslrootcert): signed by a trusted CA, any name.
    Signer(Arc<WebPkiServerVerifier>),
    /// verify-full: signed by a trusted CA and issued for the host.
    SignerAndName(Arc<WebPkiServerVerifier>),
}

impl Tls {
    /// Reads the files `params` names and makes the connector; errors name the parameter and
    /// the file.
    pub fn new(params: &Params) -> Result<Tls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let check = check(params, &provider)?;
        let check_name = matches!(check, Check::SignerAndName(_));
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = match check {
            Check::SignerAndName(verifier) => builder.with_webpki_verifier(verifier),
            Check::Signer(verifier) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyName(verifier))),
            Check::Nothing => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked(provider))),
        };
        let config = match (&params.cert, &params.key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(certs("sslcert", cert)?, private_key(key)?)
                .map_err(|e| {
                    format!(
                        "sslcert {} and sslkey {}: {e}",
                        cert.display(),
                        key.display()
                    )
                })?,
            (None, None) => builder.with_no_client_auth(),
            _ => return Err("sslcert and sslkey go together: give both or neither".into()),
        };
        Ok(Tls {
            config: Arc::new(config),
            check_name,
        })
    }
}

fn check(params: &Params, provider: &Arc<CryptoProvider>) -> Result<Check, String> {
    let verifier = |roots: &Roots| -> Result<Arc<WebPkiServerVerifier>, String> {
        WebPkiServerVerifier::builder_with_provider(Arc::new(root_store(roots)?), provider.clone())
            .build()
            .map_err(|e| format!("sslrootcert: {e}"))
    };
    match (params.mode, &params.roots) {
        (Mode::Disable | Mode::Prefer, _) | (Mode::Require, None) => Ok(Check::Nothing),
        (Mode::Require | Mode::VerifyCa, Some(roots)) => Ok(Check::Signer(verifier(roots)?)),
        (Mode::VerifyFull, Some(roots)) => Ok(Check::SignerAndName(verifier(roots)?)),
        (mode, None) => Err(format!(
            "sslmode={} needs sslrootcert: the CA certificate(s) to check the server's against, \
             a PEM file (sslrootcert=/etc/consoled/db-ca.crt) or sslrootcert=system for the \
             operating system's trust store",
            mode.as_str()
        )),
    }
}

fn root_store(roots: &Roots) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let certs = match roots {
        Roots::File(path) => certs("sslrootcert", path)?,
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty() {
                let why = found
                    .errors
                    .first()
                    .map_or(String::new(), |e| format!(": {e}"));
                return Err(format!(
                    "sslrootcert=system: the operating system's trust store has no certificate \
                     (Debian: apt-get install ca-certificates){why}"
                ));
            }
            found.certs
        }
    };
    let (added, _ignored) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "sslrootcert {roots:?}: no usable CA certificate in it"
        ));
    }
    Ok(store)
}

/// The certificates of a PEM file; at least one.
fn certs(param: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    std::fs::metadata(path).map_err(|e| format!("{param} {shown}: {e}"))?;
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{param} {shown}: not a PEM certificate file ({e:?})"))?;
    if certs.is_empty() {
        return Err(format!(
            "{param} {shown}: no certificate in it (PEM expected)"
        ));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let shown = path.display();
    std::fs::metadata(path).map_err(|e| format!("sslkey {shown}: {e}"))?;
    // The key's own bytes never reach the message, only the path.
    PrivateKeyDer::from_pem_file(path)
        .map_err(|_| format!("sslkey {shown}: no private key in it (PEM, unencrypted expected)"))
}

impl MakeTlsConnect<Socket> for Tls {
    type Stream = Stream;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, host: &str) -> io::Result<Connect> {
        let name = match ServerName::try_from(host.to_string()) {
            Ok(name) => name,
            Err(_) if self.check_name => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("sslmode=verify-full needs a host name to check, not {host:?}"),
                ))
            }
            // No name to check or send: rustls sends no SNI for an address.
            Err(_) => ServerName::IpAddress(Ipv4Addr::UNSPECIFIED.into()),
        };
        Ok(Connect {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name,
        })
    }
}

/// One handshake's connector and the name it checks.
pub struct Connect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl TlsConnect<Socket> for Connect {
    type Stream = Stream;
    type Error = io::Error;
    type Future = Handshake;

    fn connect(self, socket: Socket) -> Handshake {
        Handshake(self.connector.connect(self.name, socket))
    }
}

/// tokio-rustls's handshake, its stream wrapped in ours.
pub struct Handshake(tokio_rustls::Connect<Socket>);

impl Future for Handshake {
    type Output = io::Result<Stream>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<Stream>> {
        Pin::new(&mut self.0).poll(cx).map_ok(Stream)
    }
}

/// A TLS stream to PostgreSQL. No channel binding is offered (SCRAM runs without `-PLUS`):
/// `verify-full` is what stands between consoled and an impostor.
pub struct Stream(tokio_rustls::client::TlsStream<Socket>);

impl TlsStream for Stream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
