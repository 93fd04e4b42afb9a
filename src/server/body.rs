//! A request body, read on its connection's thread before the request meets a worker: at most
//! `MAX_BODY` bytes, within a deadline that grows with what arrived (Apache's
//! `RequestReadTimeout body=20,MinRate=500`). A worker never waits on a client.

use std::io;
use std::time::{Duration, Instant};

use crate::error::{ApiError, Code};
use crate::http::MAX_BODY;

/// After `timeout`, a body must keep arriving at this rate (Apache's `MinRate=500`).
const BODY_MIN_RATE: usize = 500;

/// Reads a request body of at most `MAX_BODY` bytes. It must arrive within `timeout` plus one
/// second per `BODY_MIN_RATE` bytes received; every read is also bounded by the socket's read
/// timeout. Bodies up to 1 KiB were already read by tiny_http with the head.
pub fn read(parsed: &mut tiny_http::Request, timeout: Duration) -> Result<Vec<u8>, ApiError> {
    match parsed.body_length() {
        Some(n) if n > MAX_BODY => return Err(ApiError::new(Code::PayloadTooLarge)),
        Some(0) => return Ok(Vec::new()),
        _ => {}
    }
    let started = Instant::now();
    let mut body = Vec::new();
    // On the heap: a connection thread's stack stays small for the stream it may become. Sized
    // to the declared body: an 8 KiB buffer per small login body was a tenth of a refusal's CPU
    // in malloc and free.
    let mut buf = vec![0u8; parsed.body_length().map_or(8192, |n| n.clamp(1, 8192))];
    let reader = parsed.as_reader();
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(body),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_failed(&e)),
        };
        if body.len() + n > MAX_BODY {
            return Err(ApiError::new(Code::PayloadTooLarge));
        }
        body.extend_from_slice(&buf[..n]);
        let allowed = timeout + Duration::from_secs((body.len() / BODY_MIN_RATE) as u64);
        if started.elapsed() > allowed {
            return Err(ApiError::new(Code::RequestTimeout));
        }
    }
}

/// A read that failed: the read time-out (too slow), or the connection's end.
fn read_failed(e: &io::Error) -> ApiError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ApiError::new(Code::RequestTimeout),
        _ => ApiError::invalid("body", "could not be read"),
    }
}
