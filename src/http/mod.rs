//! HTTP types of our own, independent of tiny_http: the request a handler sees, the response it
//! returns, and the pure parsing helpers (cookies, JSON bodies, client IP) that the fuzz tests
//! drive directly.

pub mod client;
pub mod cookies;
pub mod csrf;
pub mod framing;
pub mod json;
pub mod names;
pub mod net;
pub mod refusal;
pub mod user_agent;

use std::net::{IpAddr, SocketAddr};

use crate::error::{ApiError, Code};

/// Largest request body accepted (413 past 64 KiB; docs/API.md, "Limits").
pub const MAX_BODY: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
    Options,
    Other,
}

impl Method {
    pub fn parse(s: &str) -> Method {
        match s {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            _ => Method::Other,
        }
    }
}

/// A request as the handlers see it. Header names are lower-case; a header sent on several lines
/// appears once per line, in order (`header` shows the first).
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: Option<SocketAddr>,
}

impl Request {
    pub fn new(method: Method, target: &str) -> Request {
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (target.to_string(), String::new()),
        };
        Request {
            method,
            path,
            query,
            headers: Vec::new(),
            body: Vec::new(),
            peer: None,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn cookie(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .filter(|(n, _)| n == "cookie")
            .find_map(|(_, v)| cookies::find(v, name))
    }

    /// A query parameter, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        form_decode(&self.query)
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    /// The bearer token of `Authorization: Bearer <token>`, if well-formed.
    pub fn bearer(&self) -> Option<&str> {
        let value = self.header("authorization")?;
        let (scheme, token) = value.trim().split_once(' ')?;
        let token = token.trim();
        let ok = scheme.eq_ignore_ascii_case("bearer")
            && !token.is_empty()
            && token.len() <= 256
            && token.bytes().all(|b| b.is_ascii_graphic());
        ok.then_some(token)
    }

    /// The client's address: the socket peer, or what the configured header says when the peer
    /// is a trusted proxy.
    pub fn client_ip(&self, source: &client::Source) -> Option<IpAddr> {
        source.resolve(self.peer.map(|p| p.ip()), &self.headers)
    }

    /// The client as limits count it (see `client`), from its address (`client_ip`).
    pub fn client(&self, source: &client::Source) -> client::Client {
        client::Client::of(self.client_ip(source))
    }

    /// Checks the body's media type: a body must be `application/json`. An empty body with no
    /// content type is accepted here (endpoints that need fields then report them missing).
    pub fn require_json(&self) -> Result<(), ApiError> {
        let content_type = self.header("content-type").map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
        match content_type.as_deref() {
            Some("application/json") => Ok(()),
            None if self.body.is_empty() => Ok(()),
            _ => Err(ApiError::new(Code::UnsupportedMediaType)),
        }
    }
}

/// Decodes `application/x-www-form-urlencoded` pairs (also used for query strings).
pub fn form_decode(input: &str) -> Vec<(String, String)> {
    input
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A complete response. Event streams are not `Response`s: see `Reply::Stream`.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn empty(status: u16) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: serde_json::to_vec(value).expect("a Value always serializes"),
        }
    }

    pub fn text(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
        }
    }

    pub fn redirect(location: &str) -> Response {
        let mut r = Response::empty(302);
        r.headers.push(("Location".into(), location.into()));
        r
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn get_header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The one mapping from `ApiError` to a response.
    pub fn from_error(e: &ApiError) -> Response {
        let mut r = Response::json(e.code.status(), &e.body());
        if let Some(secs) = e.retry_after {
            r.headers.push(("Retry-After".into(), secs.to_string()));
        }
        if let Some(allow) = &e.more.allow {
            r.headers.push(("Allow".into(), allow.clone()));
        }
        for cookie in &e.more.set_cookies {
            r.headers.push(("Set-Cookie".into(), cookie.clone()));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req_with(headers: &[(&str, &str)]) -> Request {
        let mut r = Request::new(Method::Get, "/x?a=1&b=%41+c&bad=%zz&tail=%4");
        r.headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        r.peer = Some("10.0.0.1:5555".parse().unwrap());
        r
    }

    #[test]
    fn query_params_decode() {
        let r = req_with(&[]);
        assert_eq!(r.query_param("a").as_deref(), Some("1"));
        assert_eq!(r.query_param("b").as_deref(), Some("A c"));
        assert_eq!(r.query_param("bad").as_deref(), Some("%zz"));
        assert_eq!(r.query_param("tail").as_deref(), Some("%4"));
        assert_eq!(r.query_param("none"), None);
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(
            req_with(&[("authorization", "Bearer abc")]).bearer(),
            Some("abc")
        );
        assert_eq!(
            req_with(&[("authorization", "bearer  abc ")]).bearer(),
            Some("abc")
        );
        assert_eq!(req_with(&[("authorization", "Basic abc")]).bearer(), None);
        assert_eq!(req_with(&[("authorization", "Bearer")]).bearer(), None);
        assert_eq!(req_with(&[("authorization", "Bearer a b")]).bearer(), None);
    }

    #[test]
    fn json_media_type() {
        let mut r = req_with(&[("content-type", "application/json; charset=utf-8")]);
        r.body = b"{}".to_vec();
        assert!(r.require_json().is_ok());
        let mut r = req_with(&[("content-type", "text/plain")]);
        r.body = b"{}".to_vec();
        assert_eq!(
            r.require_json().unwrap_err().code,
            Code::UnsupportedMediaType
        );
        let mut r = req_with(&[]);
        assert!(r.require_json().is_ok());
        r.body = b"{}".to_vec();
        assert!(r.require_json().is_err());
    }
}
