//! An SMTP sink for tests: a real server on loopback that speaks enough of RFC 5321 (EHLO/HELO,
//! MAIL, RCPT, DATA, RSET, NOOP, QUIT) for lettre to deliver to it, and keeps every message. Also
//! a small MIME reader (multipart, quoted-printable, base64, folded headers) to get at the text
//! and the link token of a mail, whether it came over SMTP or from an `.eml` file.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine;

#[derive(Debug, Clone)]
pub struct Received {
    pub from: String,
    pub to: Vec<String>,
    /// The message as sent after DATA, dot-stuffing removed.
    pub data: String,
}

pub struct SmtpSink {
    pub port: u16,
    messages: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
}

impl SmtpSink {
    pub fn start() -> SmtpSink {
        SmtpSink::on(0)
    }

    /// A sink on a given port (a mail server coming back where it used to be).
    pub fn on(port: u16) -> SmtpSink {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind SMTP sink");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let messages = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, s) = (messages.clone(), stop.clone());
        thread::spawn(move || accept_loop(listener, m, s));
        SmtpSink {
            port,
            messages,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    pub fn messages(&self) -> Vec<Received> {
        self.messages.lock().unwrap().clone()
    }

    /// Messages addressed to `rcpt` (the sink also receives other tests' leftovers).
    pub fn to(&self, rcpt: &str) -> Vec<Received> {
        self.messages()
            .into_iter()
            .filter(|m| m.to.iter().any(|t| t.eq_ignore_ascii_case(rcpt)))
            .collect()
    }

    /// Waits until `n` messages to `rcpt` arrived; panics after `timeout`.
    #[track_caller]
    pub fn wait_for(&self, rcpt: &str, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.to(rcpt);
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} mails to {rcpt} arrived within {timeout:?}",
                got.len()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn accept_loop(listener: TcpListener, messages: Arc<Mutex<Vec<Received>>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let m = messages.clone();
                thread::spawn(move || {
                    let _ = session(stream, &m);
                });
            }
            Err(_) => thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// One SMTP conversation.
fn session(stream: TcpStream, messages: &Mutex<Vec<Received>>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut out = stream.try_clone()?;
    let mut input = BufReader::new(QuickAck(stream));
    out.write_all(b"220 sink ESMTP test sink\r\n")?;
    let mut from = String::new();
    let mut to = Vec::new();
    loop {
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim_end();
        let verb = line
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        let reply: &[u8] = match verb.as_str() {
            "EHLO" => b"250-sink greets you\r\n250-8BITMIME\r\n250 SIZE 10485760\r\n",
            "HELO" => b"250 sink\r\n",
            "MAIL" => {
                from = angle_addr(line);
                to.clear();
                b"250 2.1.0 OK\r\n"
            }
            "RCPT" => {
                to.push(angle_addr(line));
                b"250 2.1.5 OK\r\n"
            }
            "DATA" => {
                out.write_all(b"354 end with <CRLF>.<CRLF>\r\n")?;
                let data = read_data(&mut input)?;
                messages.lock().unwrap().push(Received {
                    from: from.clone(),
                    to: std::mem::take(&mut to),
                    data,
                });
                b"250 2.0.0 queued\r\n"
            }
            "RSET" => {
                from.clear();
                to.clear();
                b"250 2.0.0 OK\r\n"
            }
            "NOOP" => b"250 2.0.0 OK\r\n",
            "QUIT" => {
                out.write_all(b"221 2.0.0 bye\r\n")?;
                return Ok(());
            }
            _ => b"502 5.5.2 command not implemented\r\n",
        };
        out.write_all(reply)?;
    }
}

/// Acknowledges every read at once. lettre writes a message and its final `.` in two writes;
/// with Nagle on its side and a delayed ACK on ours, each mail would otherwise cost 40 ms.
struct QuickAck(TcpStream);

impl Read for QuickAck {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        let _ = socket2::SockRef::from(&self.0).set_quickack(true);
        Ok(n)
    }
}

/// The address between `<` and `>` of `MAIL FROM:<a>` / `RCPT TO:<b>`.
fn angle_addr(line: &str) -> String {
    let start = line.find('<').map_or(0, |i| i + 1);
    let end = line[start..].find('>').map_or(line.len(), |i| start + i);
    line[start..end].to_string()
}

fn read_data(input: &mut impl BufRead) -> std::io::Result<String> {
    let mut data = String::new();
    loop {
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            return Ok(data);
        }
        if line == ".\r\n" || line == ".\n" {
            return Ok(data);
        }
        // RFC 5321 4.5.2: a leading dot was doubled by the client.
        data.push_str(line.strip_prefix('.').unwrap_or(&line));
    }
}

/// A parsed mail (or MIME part): unfolded headers and the raw body.
pub struct Mime {
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Mime {
    pub fn parse(raw: &str) -> Mime {
        let raw = raw.replace("\r\n", "\n");
        let (head, body) = raw.split_once("\n\n").unwrap_or((&raw, ""));
        let mut headers: Vec<(String, String)> = Vec::new();
        for line in head.lines() {
            if line.starts_with([' ', '\t']) {
                // A folded header line continues the previous header.
                if let Some(last) = headers.last_mut() {
                    last.1.push(' ');
                    last.1.push_str(line.trim());
                }
            } else if let Some((n, v)) = line.split_once(':') {
                headers.push((n.trim().to_string(), v.trim().to_string()));
            }
        }
        Mime {
            headers,
            body: body.to_string(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every text part, decoded, one after the other.
    pub fn text(&self) -> String {
        let ctype = self.header("content-type").unwrap_or("text/plain");
        if ctype.to_ascii_lowercase().starts_with("multipart/") {
            let boundary = param(ctype, "boundary").expect("multipart without boundary");
            let delimiter = format!("--{boundary}");
            return self
                .body
                .split(delimiter.as_str())
                .skip(1)
                .take_while(|part| !part.starts_with("--"))
                .map(|part| Mime::parse(part.trim_start_matches('\n')).text())
                .collect::<Vec<_>>()
                .join("\n");
        }
        let cte = self
            .header("content-transfer-encoding")
            .unwrap_or("7bit")
            .to_ascii_lowercase();
        match cte.as_str() {
            "quoted-printable" => quoted_printable(&self.body),
            "base64" => {
                let compact: String = self.body.split_whitespace().collect();
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(compact)
                    .expect("base64 body");
                String::from_utf8(bytes).expect("utf-8 body")
            }
            _ => self.body.clone(),
        }
    }
}

impl Received {
    pub fn mime(&self) -> Mime {
        Mime::parse(&self.data)
    }

    pub fn subject(&self) -> String {
        self.mime().header("subject").unwrap_or("").to_string()
    }

    pub fn text(&self) -> String {
        self.mime().text()
    }

    /// The token of the first `{page}?token=` link in the mail.
    pub fn token(&self, page: &str) -> Option<String> {
        link_token(&self.text(), page)
    }
}

/// The token after `{page}?token=` in decoded text.
pub fn link_token(text: &str, page: &str) -> Option<String> {
    let marker = format!("{page}?token=");
    let start = text.find(&marker)? + marker.len();
    let token: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    Some(token)
}

fn param(header: &str, name: &str) -> Option<String> {
    header.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

/// RFC 2045 6.7: `=XX` bytes and `=` soft line breaks.
fn quoted_printable(s: &str) -> String {
    let mut out = Vec::new();
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'=' if bytes.get(i + 1) == Some(&b'\n') => i += 2,
            b'=' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => out.push(b),
                    Err(_) => out.extend_from_slice(&bytes[i..i + 3]),
                }
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
