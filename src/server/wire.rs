//! Responses written straight to a socket, where tiny_http cannot write them: the guard's answer
//! to a head that is too slow or too large, and the refusal of a connection past capacity or
//! over its share (`exit::refuse_raw`). This only frames a response, headers and all, as a
//! complete HTTP/1.1 response that closes the connection.

use crate::http::Response;

/// `r` as a complete `Connection: close` response.
pub fn close(r: &Response) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        reason(r.status),
        r.body.len()
    );
    for (name, value) in &r.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(&r.body);
    out
}

fn reason(status: u16) -> &'static str {
    match status {
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ApiError, Code};

    #[test]
    fn answers_are_complete_json_responses_with_their_headers() {
        let r = Response::from_error(&ApiError::new(Code::Unavailable));
        let raw = String::from_utf8(close(&r)).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert!(head.contains("Retry-After: 5"), "{head}");
        assert!(head.contains("Content-Type: application/json"), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "unavailable", "{v}");
    }
}
