//! One keep-alive HTTP/1.1 connection of the checks benchmark: a request written whole, the
//! answer read by `Content-Length` or chunks.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One keep-alive connection.
pub struct Conn {
    reader: BufReader<TcpStream>,
    pub writer: TcpStream,
}

impl Conn {
    pub fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Conn {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    /// The status of the answer; `None` when the connection was closed before it.
    pub fn ask(&mut self, request: &str) -> Option<u16> {
        self.writer.write_all(request.as_bytes()).ok()?;
        if self.reader.fill_buf().ok()?.is_empty() {
            return None;
        }
        Some(self.read().0)
    }

    pub fn text(&mut self, request: &str) -> String {
        self.writer.write_all(request.as_bytes()).unwrap();
        String::from_utf8_lossy(&self.read().2).into_owned()
    }

    /// Status, head lines (`Name: value\n`), body (by `Content-Length`, or chunked).
    pub fn read(&mut self) -> (u16, String, Vec<u8>) {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line
            .split_whitespace()
            .nth(1)
            .expect("a status")
            .parse()
            .unwrap();
        let (mut head, mut length, mut chunked) = (String::new(), 0, false);
        loop {
            let mut l = String::new();
            self.reader.read_line(&mut l).unwrap();
            let l = l.trim_end();
            if l.is_empty() {
                break;
            }
            let lower = l.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            chunked |= lower == "transfer-encoding: chunked";
            head.push_str(l);
            head.push('\n');
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size).unwrap();
                let n = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; n + 2];
                self.reader.read_exact(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else {
            body.resize(length, 0);
            self.reader.read_exact(&mut body).unwrap();
        }
        (status, head, body)
    }
}
