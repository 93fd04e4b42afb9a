//! Message framing (issue 15, item 6; issue 22, item 2): an HTTP/1.1 request without `Host` is
//! 400 (RFC 9112 §3.2), and so is a request whose `Content-Length` is not one decimal number
//! (RFC 9112 §6.3), one with more than one `Content-Length`, `Transfer-Encoding` or `Host` line,
//! and one whose transfer coding is anything but exactly `chunked`: such a request has no
//! trustworthy end, so the connection closes after the answer and nothing sent behind it is read
//! as a request.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;

/// A fresh connection that gives up reading after 10 s.
fn connect(server: &TestServer) -> TcpStream {
    let stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// Every response read from `from` until the server closes the connection.
fn answers_until_close(mut from: impl Read) -> Vec<Response> {
    let mut all = Vec::new();
    from.read_to_end(&mut all)
        .expect("the server closes the connection");
    let mut reader = BufReader::new(&all[..]);
    let mut responses = Vec::new();
    while !reader.fill_buf().unwrap().is_empty() {
        responses.push(read_response(&mut reader));
    }
    responses
}

/// Sends `raw` on a fresh connection; every response the server writes before it closes.
fn exchange(server: &TestServer, raw: &str) -> Vec<Response> {
    let mut stream = connect(server);
    stream.write_all(raw.as_bytes()).unwrap();
    answers_until_close(stream)
}

#[track_caller]
fn assert_refused(responses: &[Response], field: &str) {
    assert_eq!(
        responses.len(),
        1,
        "exactly one answer, then the connection closes"
    );
    let r = &responses[0];
    r.expect_error(400, "invalid_input");
    assert_eq!(r.json()["error"]["details"]["field"], field);
}

const SMUGGLED: &str = "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n";

#[test]
fn http11_without_host_is_400() {
    let server = TestServer::start();
    assert_refused(&exchange(&server, "GET /healthz HTTP/1.1\r\n\r\n"), "Host");
    assert_refused(
        &exchange(&server, &format!("GET /healthz HTTP/1.1\r\n\r\n{SMUGGLED}")),
        "Host",
    );
    // HTTP/1.0 has no Host requirement; a proper HTTP/1.1 request is served.
    let ok = exchange(&server, "GET /healthz HTTP/1.0\r\n\r\n");
    ok[0].expect(200);
    let ok = exchange(
        &server,
        "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    ok[0].expect(200);
}

#[test]
fn malformed_content_length_is_400_and_ends_the_connection() {
    let server = TestServer::start();
    let body = "{}";
    for length in ["2, 2", "+2", "0x2", "two", ""] {
        let raw = format!(
            "POST /auth/logout HTTP/1.1\r\nHost: a\r\nContent-Length: {length}\r\n\r\n\
             {body}{SMUGGLED}"
        );
        let responses = exchange(&server, &raw);
        assert!(!responses.is_empty(), "{length:?}: no answer");
        assert_eq!(responses[0].status, 400, "{length:?}");
        assert_refused(&responses, "Content-Length");
    }
    // One well-formed Content-Length: served, and the next request on the connection too.
    let raw = format!(
        "GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{body}\
         GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    );
    let responses = exchange(&server, &raw);
    assert_eq!(responses.len(), 2);
    responses[0].expect(200);
    responses[1].expect(200);
}

/// Each shape of issue 22 (the old code answered the first request and then ran the bytes
/// behind it as another: a `/metrics` answer, or a chunked body's tail).
#[test]
fn repeated_framing_headers_are_400_and_end_the_connection() {
    let server = TestServer::start();
    let metrics = "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n";
    let cases = [
        (
            "Content-Length",
            format!(
                "POST /auth/logout HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\
                 Content-Length: {}\r\n\r\n{metrics}",
                metrics.len()
            ),
        ),
        (
            "Content-Length",
            "POST /auth/logout HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\
             Content-Length: 2\r\n\r\n{}"
                .to_string()
                + SMUGGLED,
        ),
        (
            "Transfer-Encoding",
            format!(
                "POST /auth/logout HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\
                 Transfer-Encoding: identity\r\n\r\n0\r\n\r\n{metrics}"
            ),
        ),
        (
            "Host",
            format!("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n{metrics}"),
        ),
    ];
    for (field, raw) in cases {
        let responses = exchange(&server, &raw);
        assert!(!responses.is_empty(), "{raw:?}: no answer");
        assert_eq!(responses[0].status, 400, "{raw:?}");
        assert_refused(&responses, field);
    }
}

#[test]
fn http_versions_other_than_1_0_and_1_1_are_400() {
    let server = TestServer::start();
    for version in ["HTTP/2.0", "HTTP/3.0", "HTTP/1.2"] {
        let responses = exchange(
            &server,
            &format!("GET /healthz {version}\r\nHost: a\r\n\r\n{SMUGGLED}"),
        );
        assert!(!responses.is_empty(), "{version}: no answer");
        assert_refused(&responses, "HTTP version");
    }
}

#[test]
fn a_transfer_coding_other_than_chunked_is_400() {
    let server = TestServer::start();
    let raw = |coding: &str| {
        format!(
            "POST /auth/logout HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {coding}\r\n\r\n\
             0\r\n\r\n{SMUGGLED}"
        )
    };
    // Codings tiny_http_fork frames as chunked and would pass on undecoded: ours to refuse.
    for coding in ["gzip, chunked", "deflate,chunked", "compress, chunked"] {
        let responses = exchange(&server, &raw(coding));
        assert!(!responses.is_empty(), "{coding:?}: no answer");
        assert_eq!(responses[0].status, 400, "{coding:?}");
        assert_refused(&responses, "Transfer-Encoding");
    }
    // Codings tiny_http_fork would refuse itself with an empty 400: refused by us first, from
    // the connection's first head read ahead, with the JSON answer.
    for coding in [
        "identity",
        "chunked, chunked",
        "chunked;x=1",
        "x",
        "Chunked",
    ] {
        let responses = exchange(&server, &raw(coding));
        assert!(!responses.is_empty(), "{coding:?}: no answer");
        assert_refused(&responses, "Transfer-Encoding");
    }
    // Transfer-Encoding beside Content-Length, the same way.
    let both = format!(
        "POST /auth/logout HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\
         Content-Length: 5\r\n\r\n0\r\n\r\n{SMUGGLED}"
    );
    assert_refused(&exchange(&server, &both), "Transfer-Encoding");
    // Behind earlier requests on the same connection, sent at once (their bytes sit in the
    // parser's buffer), the same answer: the earlier ones are served, then the refusal and the
    // close; nothing behind it runs.
    let big = "x".repeat(1500);
    let earlier = format!(
        "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n\
         GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{{}}\
         GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{big}",
        big.len()
    );
    for coding in ["identity", "chunked;x=1", "Chunked"] {
        let responses = exchange(&server, &format!("{earlier}{}", raw(coding)));
        assert_eq!(
            responses.len(),
            4,
            "{coding:?}: three answers, the refusal, then the close"
        );
        for r in &responses[..3] {
            r.expect(200);
        }
        assert_refused(&responses[3..], "Transfer-Encoding");
    }
    assert_refused(
        &exchange(&server, &format!("{earlier}{both}"))[3..],
        "Transfer-Encoding",
    );
    // And a head that comes later on a kept-alive connection, after the answers.
    for coding in ["identity", "x"] {
        let mut stream = connect(&server);
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        stream.write_all(earlier.as_bytes()).unwrap();
        for _ in 0..3 {
            read_response(&mut reader).expect(200);
        }
        stream.write_all(raw(coding).as_bytes()).unwrap();
        // Exactly one answer after the three, then the end.
        assert_refused(&answers_until_close(reader), "Transfer-Encoding");
    }
    // A head that comes in pieces, the refused line in a later piece: the same answer.
    for coding in ["identity", "Chunked"] {
        let mut stream = connect(&server);
        stream
            .write_all(b"POST /auth/logout HTTP/1.1\r\nHost: a\r\n")
            .unwrap();
        std::thread::sleep(Duration::from_millis(150));
        stream
            .write_all(format!("Transfer-Encoding: {coding}\r\n").as_bytes())
            .unwrap();
        std::thread::sleep(Duration::from_millis(150));
        stream
            .write_all(format!("\r\n0\r\n\r\n{SMUGGLED}").as_bytes())
            .unwrap();
        assert_refused(&answers_until_close(stream), "Transfer-Encoding");
    }
    // Behind a chunked body sent with its head (followed to its end): the same answer.
    let chunked = "POST /auth/logout HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\
                   Content-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    let responses = exchange(&server, &format!("{chunked}{}", raw("identity")));
    assert_eq!(
        responses.len(),
        2,
        "the chunked request's answer, then the refusal"
    );
    assert_refused(&responses[1..], "Transfer-Encoding");
    // A chunked body whose end was not seen with its head: where the next head starts is not
    // known, so the connection ends after the answer and nothing sent behind it is read (a
    // client that pipelines sends it again on a new connection).
    let mut stream = connect(&server);
    let (head, body) = chunked.split_at(chunked.find("2\r\n{}").unwrap());
    stream.write_all(head.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    stream
        .write_all(format!("{body}{}", raw("identity")).as_bytes())
        .unwrap();
    let responses = answers_until_close(stream);
    assert_eq!(
        responses.len(),
        1,
        "nothing read behind a body the screen could not follow"
    );
    assert_ne!(responses[0].status, 400, "the chunked request is served");
    // Exactly `chunked` is served, and the next request on the connection too.
    let raw = "POST /auth/logout HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\
               Content-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\n\r\n\
               GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let responses = exchange(&server, raw);
    assert_eq!(responses.len(), 2, "two answers");
    assert_ne!(responses[0].status, 400, "a chunked body is framed");
    responses[1].expect(200);
}

/// RFC 9112 §5.2 (issue 37, item 8): a header line that starts with a space or a tab
/// (obsolete line folding) is refused with 400, and the connection ends. Before, the parser
/// trimmed such a line and read it as a header of its own: a folded `Content-Length`,
/// `Transfer-Encoding`, `Host` or `Cookie` framed or named the request, and a front end that
/// forwards folds as continuations would see another request than ours.
#[test]
fn a_folded_header_line_is_400_and_ends_the_connection() {
    let server = TestServer::start();
    let metrics = "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n";
    let folded = [
        format!(" Content-Length: {}", metrics.len()),
        "\tTransfer-Encoding: chunked".to_string(),
        " Host: b".to_string(),
        "\tCookie: svc_session=x".to_string(),
        // A continuation of the line before it, without a colon of its own.
        " continued".to_string(),
    ];
    for line in &folded {
        let raw =
            format!("POST /auth/logout HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n{line}\r\n\r\n{metrics}");
        let responses = exchange(&server, &raw);
        assert!(!responses.is_empty(), "{line:?}: no answer");
        assert_eq!(responses[0].status, 400, "{line:?}");
        assert_refused(&responses, "header line");
    }
    // Right after the request line, the same.
    let raw = format!("GET /healthz HTTP/1.1\r\n Host: a\r\nHost: a\r\n\r\n{SMUGGLED}");
    assert_refused(&exchange(&server, &raw), "header line");
    // Later on a kept-alive connection, after an answer: the same.
    let raw = format!("GET /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /healthz HTTP/1.1\r\nHost: a\r\n\tX: y\r\n\r\n{SMUGGLED}");
    let responses = exchange(&server, &raw);
    assert_eq!(
        responses.len(),
        2,
        "the answer, the refusal, then the close"
    );
    responses[0].expect(200);
    assert_refused(&responses[1..], "header line");
}

/// RFC 9112 §6.1 (issue 37, item 8): an HTTP/1.0 request with `Transfer-Encoding` has framing
/// that cannot be trusted; it is answered, and the connection closes after the answer even when
/// the client asked to keep it.
#[test]
fn http_1_0_with_transfer_encoding_closes_after_the_answer() {
    let server = TestServer::start();
    let raw =
        "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n\
               0\r\n\r\nGET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    let responses = exchange(&server, raw);
    assert_eq!(responses.len(), 1, "one answer, then the close");
    responses[0].expect(200);
    // Without Transfer-Encoding, a kept-alive HTTP/1.0 connection carries the next request.
    let raw = "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n\
               GET /healthz HTTP/1.0\r\n\r\n";
    let responses = exchange(&server, raw);
    assert_eq!(responses.len(), 2, "both answered");
}

/// docs/API.md (issue 37, item 8): a header value over 8 KiB is 431 whatever the header, not
/// only for the headers the application reads; the connection then closes.
#[test]
fn any_header_value_over_8_kib_is_431() {
    let server = TestServer::start();
    for name in ["X-Junk", "Accept-Language", "Host"] {
        let raw = format!(
            "GET /healthz HTTP/1.1\r\nHost: a\r\n{name}: {}\r\n\r\n{SMUGGLED}",
            "v".repeat(8 * 1024 + 1)
        );
        let raw = raw.replacen("Host: a\r\nHost:", "Host:", 1);
        let responses = exchange(&server, &raw);
        assert_eq!(responses.len(), 1, "{name}: one answer, then the close");
        responses[0].expect_error(431, "header_too_large");
    }
    // 8 KiB exactly is taken.
    let raw = format!(
        "GET /healthz HTTP/1.1\r\nHost: a\r\nX-Junk: {}\r\nConnection: close\r\n\r\n",
        "v".repeat(8 * 1024)
    );
    exchange(&server, &raw)[0].expect(200);
}
