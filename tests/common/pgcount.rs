//! A TCP proxy in front of PostgreSQL that counts round trips: the client's `Sync` and simple
//! `Query` messages, after each of which it waits for `ReadyForQuery`. A test points a server's
//! pool at it (its listener and background connections elsewhere) and reads the count.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub struct CountingProxy {
    pub port: u16,
    round_trips: Arc<AtomicU64>,
}

impl CountingProxy {
    /// A proxy to `target` (host:port).
    pub fn start(target: String) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let round_trips = Arc::new(AtomicU64::new(0));
        let counter = round_trips.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let counter = counter.clone();
                std::thread::spawn(move || count_and_copy(client, server, &counter));
                std::thread::spawn(move || {
                    let (mut from, mut to) = (s2, c2);
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        CountingProxy { port, round_trips }
    }

    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::SeqCst)
    }
}

/// Copies the client's messages to the server, counting `S` (Sync) and `Q` (Query). The first
/// message (startup, or an SSL request and then startup) has no type byte.
fn count_and_copy(mut from: TcpStream, mut to: TcpStream, counter: &AtomicU64) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16384];
    let mut untyped = true;
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&chunk[..n]).is_err() {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        loop {
            let head = if untyped { 0 } else { 1 };
            if buf.len() < head + 4 {
                break;
            }
            let len = u32::from_be_bytes(buf[head..head + 4].try_into().unwrap()) as usize;
            if buf.len() < head + len {
                break;
            }
            if untyped {
                // An SSL request (code 80877103) is answered 'N' and followed by the startup.
                let code = if len >= 8 {
                    u32::from_be_bytes(buf[4..8].try_into().unwrap())
                } else {
                    0
                };
                untyped = code == 80877103;
            } else if matches!(buf[0], b'S' | b'Q') {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            buf.drain(..head + len);
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}
