//! A request head as the application reads it: tiny_http's request turned into ours (the
//! headers we read, every line of each), on the connection's thread, before the request meets a
//! worker or a screen.

use crate::error::{ApiError, Code};
use crate::http::{Method, Request};

/// Longest request target or header value we accept (431 past it).
pub const MAX_HEADER_VALUE: usize = 8 * 1024;

/// The headers we read: those the application reads, and the framing headers, every line of
/// each (a repeated framing line is refused, `http::framing`).
const HEADERS: [&str; 15] = [
    "host",
    "cookie",
    "authorization",
    "content-type",
    "origin",
    "sec-fetch-site",
    "x-csrf-token",
    "x-forwarded-for",
    "accept",
    "user-agent",
    "last-event-id",
    // The original request's method, as a proxy names it to `GET /auth/check`.
    "x-original-method",
    "x-forwarded-method",
    "content-length",
    "transfer-encoding",
];

/// Every line of the headers we read (and of the one the client address may come from), in
/// order: read once per request, for the framing check and then for the application.
pub fn lines(rq: &tiny_http::Request, client_header: &str) -> Vec<(String, String)> {
    // tiny_http_fork looks headers up by name only; these are all we ever read, plus the one
    // the client address may come from.
    let client_header = Some(client_header).filter(|h| !HEADERS.contains(h));
    every_line(rq.headers(), HEADERS.iter().copied().chain(client_header))
}

/// The answer to a header value over `MAX_HEADER_VALUE` (431).
pub fn value_too_long() -> ApiError {
    ApiError::new(Code::HeaderTooLarge)
}

/// Converts a tiny_http request, its header lines (`lines`) and its body into ours.
pub fn read_request(
    rq: &tiny_http::Request,
    lines: Vec<(String, String)>,
    body: Vec<u8>,
) -> Result<Request, ApiError> {
    if rq.url().len() > MAX_HEADER_VALUE {
        return Err(ApiError::new(Code::HeaderTooLarge).message("The request target is too long."));
    }
    let mut req = Request::new(Method::parse(rq.method().as_str()), rq.url());
    req.peer = rq.remote_addr().copied();
    req.headers = lines;
    if req.headers.iter().any(|(_, v)| v.len() > MAX_HEADER_VALUE) {
        return Err(value_too_long());
    }
    req.body = body;
    Ok(req)
}

/// The client's address for the access line (the full address, where limits count an IPv6
/// client by its /64), resolved as `Request::client` does.
pub fn client_ip(
    rq: &tiny_http::Request,
    source: &crate::http::client::Source,
) -> Option<std::net::IpAddr> {
    let peer = rq.remote_addr().map(|a| a.ip());
    let peer_is_proxy = peer.is_some_and(|ip| source.is_proxy(ip));
    let lines = if peer_is_proxy {
        every_line(rq.headers(), std::iter::once(source.header.as_str()))
    } else {
        Vec::new()
    };
    source.resolve(peer, &lines)
}

/// Every line of each named header, in order. tiny_http's `get` shows only a name's first line;
/// in a copy, each line read is renamed, so that `get` finds the next. (A client's own
/// `X-Forwarded-For` line comes before the one HAProxy appends: reading only the first would let
/// the client choose its address.)
fn every_line<'a>(
    headers: &tiny_http::Headers,
    names: impl Iterator<Item = &'a str>,
) -> Vec<(String, String)> {
    let read: tiny_http::HeaderField = "x-consoled-read".parse().expect("a header name");
    let mut copy: Option<tiny_http::Headers> = None;
    let mut out = Vec::new();
    for name in names {
        if headers.get(name).is_none() {
            continue;
        }
        let copy = copy.get_or_insert_with(|| headers.clone());
        while let Some(h) = copy.get_header_mut(name) {
            out.push((name.to_string(), h.value.as_ref().as_str().to_string()));
            h.field = read.clone();
        }
    }
    out
}
