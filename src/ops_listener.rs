//! The operations listener (`CONSOLED_METRICS_LISTEN`): `/metrics`, `/healthz` and `/readyz` on
//! an address of their own, as Keycloak (its management port) and Kratos (its admin port) keep
//! theirs off the public one. With it set, the public listener answers `/metrics` 404: whatever
//! a counter may tell (issue 37, item 4: which addresses have an account, before it was fixed),
//! the public cannot read it, even when a proxy in front forwards every path.
//!
//! A small HTTP/1.1 server for a private address and a scraper: GET only, one request per
//! connection (`Connection: close`), a head of at most 8 KiB read within 2 s, on a short-lived
//! thread per connection and at most `AT_ONCE` of them (more are closed unanswered). It shares
//! nothing with the public server but the application; its answers are not counted in
//! `consoled_requests_total`, so a scrape does not move what it reads.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::app::App;
use crate::error::{ApiError, Code};
use crate::http::Response;
use crate::ops;

/// Connections served at once; a scraper needs one.
const AT_ONCE: usize = 4;
const HEAD_MAX: usize = 8 * 1024;
const TIMEOUT: Duration = Duration::from_secs(2);

/// A running operations listener.
pub struct OpsListener {
    pub addr: SocketAddr,
    thread: thread::JoinHandle<()>,
}

/// Binds `addr`; a failure names the setting.
pub fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .map_err(|e| format!("cannot listen on CONSOLED_METRICS_LISTEN={addr}: {e}"))
}

/// Serves `listener` until `app.stopping` is set and `stop` wakes it.
pub fn start(app: Arc<App>, listener: TcpListener) -> std::io::Result<OpsListener> {
    let addr = listener.local_addr()?;
    let thread = thread::Builder::new()
        .name("ops-listener".into())
        .spawn(move || accept_loop(&app, &listener))?;
    Ok(OpsListener { addr, thread })
}

impl OpsListener {
    /// Ends the accept loop (`app.stopping` must be set): a connection of our own wakes it.
    pub fn stop(self) {
        let _ = TcpStream::connect_timeout(&self.addr, TIMEOUT);
        let _ = self.thread.join();
    }
}

fn accept_loop(app: &Arc<App>, listener: &TcpListener) {
    let busy = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if app.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let Some(place) = Place::take(&busy) else {
            continue;
        };
        let app = app.clone();
        // A thread that cannot start drops its closure, and the place with it.
        let _ = thread::Builder::new()
            .name("ops-conn".into())
            .spawn(move || {
                let _place = place;
                serve(&app, stream);
            });
    }
}

/// One of the `AT_ONCE` connections served at once, given back on drop.
struct Place(Arc<AtomicUsize>);

impl Place {
    fn take(busy: &Arc<AtomicUsize>) -> Option<Place> {
        let taken = busy.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < AT_ONCE).then_some(n + 1)
        });
        taken.is_ok().then(|| Place(busy.clone()))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve(app: &App, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(TIMEOUT));
    let _ = stream.set_write_timeout(Some(TIMEOUT));
    let Some(head) = read_head(&mut stream) else {
        return;
    };
    let mut words = head.lines().next().unwrap_or("").split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let response = answer(app, method, path);
    let _ = stream.write_all(&wire(&response));
}

/// The request head, up to its blank line; `None` when it does not come whole in time.
fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).ok().filter(|n| *n > 0)?;
        head.extend_from_slice(&buf[..n]);
        if head.len() > HEAD_MAX {
            return None;
        }
    }
    String::from_utf8(head).ok()
}

fn answer(app: &App, method: &str, path: &str) -> Response {
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return Response::from_error(&ApiError::new(Code::NotFound));
    }
    if method != "GET" {
        return Response::from_error(&ApiError::method_not_allowed(&["GET"]));
    }
    match path {
        "/metrics" => ops::metrics_text(app),
        "/healthz" => ops::health(),
        _ => ops::readiness(app).unwrap_or_else(|e| Response::from_error(&e)),
    }
}

/// The response as bytes on the wire, closing the connection.
fn wire(r: &Response) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", r.status, reason(r.status));
    for (name, value) in &r.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        r.body.len()
    ));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&r.body);
    bytes
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    }
}
