//! Message framing checks on a parsed request head, before its body is read (RFC 9112).
//!
//! - An HTTP/1.1 request must carry `Host` (§3.2), exactly one line of it (§3.2: "more than one
//!   Host header line" is a 400).
//! - `Content-Length` must be one decimal number on one line (§6.3). tiny_http_fork takes only
//!   the first line, and a value it cannot parse (`+5`, `5, 5`, `0x5`) as no body at all, so the
//!   bytes of that body would be read as the next request.
//! - `Transfer-Encoding` must be one line saying exactly `chunked`, the only coding we decode.
//!   tiny_http_fork frames by the first line only, and passes codings such as `gzip, chunked`
//!   on undecoded. (It refuses `Transfer-Encoding` together with `Content-Length`, and a coding
//!   list whose last element is not `chunked`, itself, with an empty 400 that also closes.)
//!
//! - No header line may start with a space or a tab (§5.2: obsolete line folding). tiny_http_fork
//!   trims such a line and reads it as a header of its own, so a folded `Content-Length` would
//!   frame the request here while a front end that joins folds sees another request.
//!
//! Each is refused with 400, and the connection closes after the answer: nothing sent behind
//! such a head is read as a request.
//!
//! What tiny_http_fork refuses itself it answers with an empty 400 before our code sees the
//! request. Each head is therefore read ahead, without taking it off the socket (`raw_head`, by
//! `server::ahead`), and checked for those shapes too (`check_before_parser`), so that the
//! answer is ours, in JSON. The parser reads only heads seen whole this way; where the next
//! head's start is not known, the connection ends instead (`server::ahead`).

use crate::error::ApiError;

/// The head's framing: its version and every line of the framing headers.
pub struct Head<'a> {
    /// (major, minor)
    pub version: (u8, u8),
    pub host: Vec<&'a str>,
    pub content_length: Vec<&'a str>,
    pub transfer_encoding: Vec<&'a str>,
    /// A line starts with a space or a tab (a fold; `raw_head` keeps such a line's start).
    pub folded: bool,
}

impl<'a> Head<'a> {
    /// The framing of a head whose header lines are `lines` (lower-case names, every line).
    pub fn of(version: (u8, u8), lines: &'a [(String, String)]) -> Head<'a> {
        let named = |name: &str| {
            lines
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        Head {
            version,
            host: named("host"),
            content_length: named("content-length"),
            transfer_encoding: named("transfer-encoding"),
            folded: lines.iter().any(|(n, _)| n.starts_with([' ', '\t'])),
        }
    }
}

/// 400 `invalid_input` naming the header, or Ok.
pub fn check(head: &Head) -> Result<(), ApiError> {
    if head.version >= (1, 1) && head.host.is_empty() {
        return Err(ApiError::invalid("Host", "required in HTTP/1.1")
            .message("An HTTP/1.1 request needs a Host header."));
    }
    if head.host.len() > 1 {
        return Err(ApiError::invalid("Host", "one line")
            .message("The request has more than one Host header."));
    }
    match head.content_length[..] {
        [] => {}
        [value] => {
            let value = value.trim_matches([' ', '\t']);
            if value.is_empty() || value.len() > 18 || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ApiError::invalid("Content-Length", "one decimal number")
                    .message("The Content-Length header is not a single decimal number."));
            }
        }
        _ => {
            return Err(ApiError::invalid("Content-Length", "one line")
                .message("The request has more than one Content-Length header."))
        }
    }
    match head.transfer_encoding[..] {
        [] => Ok(()),
        [value]
            if value
                .trim_matches([' ', '\t'])
                .eq_ignore_ascii_case("chunked") =>
        {
            Ok(())
        }
        _ => Err(not_chunked()),
    }
}

fn not_chunked() -> ApiError {
    ApiError::invalid("Transfer-Encoding", "one line: chunked")
        .message("The only transfer coding accepted is a single `chunked`.")
}

/// What tiny_http_fork would refuse itself before our code saw the request, and everything
/// `check` refuses: `Transfer-Encoding` beside `Content-Length` (RFC 9112 §6.1 allows refusing
/// it), and any coding but exactly `chunked` (tiny_http takes no other case, list or parameter).
pub fn check_before_parser(head: &Head) -> Result<(), ApiError> {
    if !matches!(head.version, (1, 0) | (1, 1)) {
        // tiny_http_fork answers a later version 505 and reads on, past what was screened.
        return Err(ApiError::invalid("HTTP version", "1.0 or 1.1")
            .message("Only HTTP/1.0 and HTTP/1.1 are served here."));
    }
    if head.folded {
        return Err(ApiError::invalid("header line", "no line folding")
            .message("A header line cannot start with a space or a tab (line folding)."));
    }
    check(head)?;
    if !head.transfer_encoding.is_empty() && !head.content_length.is_empty() {
        return Err(
            ApiError::invalid("Transfer-Encoding", "not with Content-Length")
                .message("A request cannot carry both Transfer-Encoding and Content-Length."),
        );
    }
    if head
        .transfer_encoding
        .iter()
        .any(|v| v.trim_matches([' ', '\t']) != "chunked")
    {
        return Err(not_chunked());
    }
    Ok(())
}

/// A head read ahead of the parser.
#[derive(Debug, PartialEq)]
pub struct RawHead {
    /// (major, minor)
    pub version: (u8, u8),
    /// Every header line: lower-case name, trimmed value; a folded line (one that starts with a
    /// space or a tab) whole, as its name, untrimmed.
    pub lines: Vec<(String, String)>,
    /// Its length on the wire, the blank line included.
    pub len: usize,
}

/// The length of the head at the start of `bytes` (its blank line included), when it ends there.
pub fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|end| end + 4)
}

/// The head at the start of `bytes`, when it is whole there and readable; else `None`, and the
/// parser decides.
pub fn raw_head(bytes: &[u8]) -> Option<RawHead> {
    let end = head_end(bytes)? - 4;
    let text = std::str::from_utf8(&bytes[..end]).ok()?;
    let mut lines = text.split("\r\n");
    let version = match lines.next()?.rsplit(' ').next()?.as_bytes() {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            (major - b'0', minor - b'0')
        }
        _ => return None,
    };
    let lines = lines
        .map(|line| {
            if line.starts_with([' ', '\t']) {
                return Some((line.to_string(), String::new()));
            }
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_ascii_lowercase(), value.trim().to_string()))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(RawHead {
        version,
        lines,
        len: end + 4,
    })
}

/// The length on the wire of the chunked body at the start of `bytes`, when it ends there:
/// chunks whose size lines are bare hexadecimal (no extensions), then `0`, then the blank line
/// (no trailers). Anything else, or a body not whole in `bytes`: `None` (the next request's start
/// is then not known).
pub fn chunked_len(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line = bytes.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let digits = &bytes[at..at + line];
        if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let size = usize::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?;
        at += line + 2;
        if size == 0 {
            return (bytes.get(at..at + 2)? == b"\r\n").then_some(at + 2);
        }
        if bytes.get(at + size..at + size + 2)? != b"\r\n" {
            return None;
        }
        at += size + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(version: (u8, u8), host: Option<&str>, length: Option<&str>) -> bool {
        check(&Head {
            version,
            host: host.into_iter().collect(),
            content_length: length.into_iter().collect(),
            transfer_encoding: vec![],
            folded: false,
        })
        .is_ok()
    }

    #[test]
    fn host_is_required_from_http_1_1_on() {
        assert!(ok((1, 1), Some("a"), None));
        assert!(ok((1, 1), Some(""), None));
        assert!(!ok((1, 1), None, None));
        assert!(ok((1, 0), None, None));
    }

    #[test]
    fn content_length_is_one_decimal_number() {
        for good in ["0", "2", " 17 ", "000123"] {
            assert!(ok((1, 1), Some("a"), Some(good)), "{good:?}");
        }
        for bad in [
            "",
            "+2",
            "-1",
            "2, 2",
            "0x2",
            "two",
            "1e3",
            "99999999999999999999",
        ] {
            assert!(!ok((1, 1), Some("a"), Some(bad)), "{bad:?}");
        }
    }

    #[test]
    fn framing_headers_are_single_lines_and_the_only_coding_is_chunked() {
        let lines = |l: &[(&str, &str)]| -> Vec<(String, String)> {
            l.iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        let field = |l: &[(&str, &str)]| {
            let l = lines(l);
            check(&Head::of((1, 1), &l))
                .err()
                .map(|e| e.more.details.unwrap()["field"].clone())
        };
        assert_eq!(
            field(&[("host", "a"), ("transfer-encoding", "chunked")]),
            None
        );
        assert_eq!(
            field(&[("host", "a"), ("transfer-encoding", " Chunked ")]),
            None
        );
        assert_eq!(field(&[("host", "a"), ("host", "a")]).unwrap(), "Host");
        let two = [
            ("host", "a"),
            ("content-length", "0"),
            ("content-length", "0"),
        ];
        assert_eq!(field(&two).unwrap(), "Content-Length");
        for te in [
            &["chunked", "identity"][..],
            &["gzip, chunked"],
            &["identity"],
            &[""],
        ] {
            let mut l = vec![("host", "a")];
            l.extend(te.iter().map(|v| ("transfer-encoding", *v)));
            assert_eq!(field(&l).unwrap(), "Transfer-Encoding", "{te:?}");
        }
    }

    #[test]
    fn a_head_read_ahead_is_checked_for_what_the_parser_would_refuse() {
        let read = |raw: &str| raw_head(raw.as_bytes());
        assert_eq!(read("GET / HTTP/1.1\r\nHost: a"), None, "not whole yet");
        let raw = "POST / HTTP/1.1\r\nHOST: a\r\nTransfer-Encoding: Chunked\r\n\r\n";
        let RawHead {
            version,
            lines,
            len,
        } = read(&format!("{raw}rest")).unwrap();
        assert_eq!(version, (1, 1));
        assert_eq!(len, raw.len(), "the head ends after its blank line");
        assert_eq!(lines[0], ("host".to_string(), "a".to_string()));
        let refused =
            |lines: &[(String, String)]| check_before_parser(&Head::of((1, 1), lines)).is_err();
        assert!(refused(&lines), "`Chunked` is not exactly `chunked`");
        let line = |n: &str, v: &str| (n.to_string(), v.to_string());
        assert!(!refused(&[
            line("host", "a"),
            line("transfer-encoding", "chunked")
        ]));
        assert!(refused(&[
            line("host", "a"),
            line("transfer-encoding", "chunked"),
            line("content-length", "5")
        ]));
        assert!(refused(&[
            line("host", "a"),
            line("transfer-encoding", "chunked;x=1")
        ]));
        assert!(!refused(&[line("host", "a"), line("content-length", "5")]));
    }

    #[test]
    fn a_folded_line_is_refused_before_the_parser_and_frames_nothing() {
        for raw in [
            "POST / HTTP/1.1\r\nHost: a\r\n Content-Length: 5\r\n\r\n",
            "GET / HTTP/1.1\r\n\tcontinued\r\nHost: a\r\n\r\n",
        ] {
            let h = raw_head(raw.as_bytes()).expect("read, folds and all");
            let head = Head::of(h.version, &h.lines);
            assert!(head.content_length.is_empty(), "a fold frames nothing");
            let e = check_before_parser(&head).unwrap_err();
            assert_eq!(e.more.details.unwrap()["field"], "header line", "{raw:?}");
        }
    }

    #[test]
    fn a_chunked_body_is_followed_to_its_end_or_not_at_all() {
        let whole = b"2\r\n{}\r\n10\r\n0123456789abcdef\r\n0\r\n\r\nGET";
        assert_eq!(chunked_len(whole), Some(whole.len() - 3));
        assert_eq!(chunked_len(b"0\r\n\r\n"), Some(5));
        for cut in [&b"2\r\n{}\r\n"[..], b"2\r\n{", b"0\r\n", b""] {
            assert_eq!(chunked_len(cut), None, "not whole: {cut:?}");
        }
        for odd in [
            &b"2;x=1\r\n{}\r\n0\r\n\r\n"[..],
            b"0\r\nT: 1\r\n\r\n",
            b"2\r\n{}}\r\n",
        ] {
            assert_eq!(chunked_len(odd), None, "not followed: {odd:?}");
        }
    }

    #[test]
    fn only_http_1_0_and_1_1_pass_the_screen() {
        let head = |raw: &str| raw_head(raw.as_bytes()).unwrap();
        for (raw, ok) in [
            ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", true),
            ("GET / HTTP/1.0\r\n\r\n", true),
            ("GET / HTTP/2.0\r\nHost: a\r\n\r\n", false),
            ("GET / HTTP/0.9\r\n\r\n", false),
        ] {
            let h = head(raw);
            assert_eq!(
                check_before_parser(&Head::of(h.version, &h.lines)).is_ok(),
                ok,
                "{raw:?}"
            );
        }
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nx"), Some(18));
    }
}
