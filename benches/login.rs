//! Login load benchmark (issue 2): in one run on one machine it measures
//! 1. raw argon2id hashes/s with the service's parameters on `cores` threads,
//! 2. password logins/s through the real server (a separate `consoled` process) while 16 clients
//!    flood POST /auth/login (a client told 429 waits for Retry-After, as a well-behaved client
//!    does), and their ratio to (1) (goal >= 0.9),
//! 3. GET /auth/session latency p50/p99 from a 17th client during the flood (goal p99 < 20 ms),
//! 4. the server's peak RSS during the flood (goal < 128 MB).
//!
//! Run with `make bench` (release build, private PostgreSQL). Prints a Markdown table.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const FLOOD_CLIENTS: usize = 16;
const FLOOD_SECONDS: u64 = 10;
const PASSWORD: &str = "benchmark password 1";

fn main() {
    let database_url = std::env::var("DATABASE_URL").expect("DATABASE_URL (make bench sets it)");
    let cores = thread::available_parallelism().map_or(2, |n| n.get());
    let raw = raw_hash_rate(cores, Duration::from_secs(5));

    let server = common::Server::start(&database_url, &[]);
    let addr = server.addr;
    let email = format!("bench-{}@example.com", std::process::id());
    let mut setup = Conn::open(addr);
    let csrf = "benchcsrftokenbenchcsrftokenbenchcsrftoken0";
    let signup = format!(r#"{{"email":"{email}","password":"{PASSWORD}","name":"Bench"}}"#);
    let (status, headers) = setup.post("/auth/signup", csrf, None, &signup);
    assert_eq!(status, 201, "signup failed");
    let session = cookie(&headers, "svc_session").expect("session cookie");

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let body = format!(r#"{{"email":"{email}","password":"{PASSWORD}"}}"#);
    let flood: Vec<_> = (0..FLOOD_CLIENTS)
        .map(|_| {
            let (stop, ok, refused, body) =
                (stop.clone(), ok.clone(), refused.clone(), body.clone());
            thread::spawn(move || {
                let mut conn = Conn::open(addr);
                while !stop.load(Ordering::Relaxed) {
                    let (status, headers) = conn.post("/auth/login", csrf, None, &body);
                    match status {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        429 => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            // A well-behaved client waits as long as Retry-After says.
                            let secs: u64 = header(&headers, "retry-after")
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(1);
                            thread::sleep(Duration::from_secs(secs));
                            0
                        }
                        s => panic!("login answered {s}"),
                    };
                }
            })
        })
        .collect();
    let probe = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut conn = Conn::open(addr);
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let status = conn.get("/auth/session", &session);
                samples.push(t.elapsed());
                assert_eq!(status, 200);
                thread::sleep(Duration::from_millis(10));
            }
            samples
        })
    };
    let started = Instant::now();
    let mut peak_rss = 0;
    while started.elapsed() < Duration::from_secs(FLOOD_SECONDS) {
        peak_rss = peak_rss.max(rss_kib(server.pid()));
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    for t in flood {
        t.join().unwrap();
    }
    let mut samples = probe.join().unwrap();
    drop(server);

    samples.sort();
    let pct = |p: f64| {
        samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)].as_secs_f64() * 1000.0
    };
    let logins = ok.load(Ordering::Relaxed) as f64 / elapsed;
    println!("| measure | value | goal |");
    println!("|---|---|---|");
    println!("| raw argon2id hashes/s ({cores} threads) | {raw:.1} | |");
    println!("| password logins/s ({FLOOD_CLIENTS} clients, {FLOOD_SECONDS} s) | {logins:.1} | |");
    println!("| logins/s ÷ hashes/s | {:.2} | >= 0.9 |", logins / raw);
    println!(
        "| 429 answers during the flood | {} | |",
        refused.load(Ordering::Relaxed)
    );
    println!(
        "| GET /auth/session p50 during flood | {:.2} ms | |",
        pct(0.50)
    );
    println!(
        "| GET /auth/session p99 during flood | {:.2} ms | < 20 ms |",
        pct(0.99)
    );
    println!(
        "| server peak RSS during flood | {:.1} MB | < 128 MB |",
        peak_rss as f64 / 1024.0
    );
}

fn raw_hash_rate(threads: usize, duration: Duration) -> f64 {
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let count = count.clone();
            thread::spawn(move || {
                while start.elapsed() < duration {
                    consoled::hashing::hash_blocking(PASSWORD).unwrap();
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn cookie(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .find_map(|(_, v)| {
            v.split(';')
                .next()?
                .strip_prefix(&format!("{name}="))
                .map(str::to_string)
        })
}

/// One keep-alive connection.
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Conn {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    fn post(
        &mut self,
        path: &str,
        csrf: &str,
        session: Option<&str>,
        body: &str,
    ) -> (u16, Vec<(String, String)>) {
        let session = session
            .map(|s| format!("; svc_session={s}"))
            .unwrap_or_default();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nX-CSRF-Token: {csrf}\r\n\
             Cookie: svc_csrf={csrf}{session}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.writer.write_all(head.as_bytes()).unwrap();
        self.read()
    }

    fn get(&mut self, path: &str, session: &str) -> u16 {
        let head =
            format!("GET {path} HTTP/1.1\r\nHost: bench\r\nCookie: svc_session={session}\r\n\r\n");
        self.writer.write_all(head.as_bytes()).unwrap();
        self.read().0
    }

    fn read(&mut self) -> (u16, Vec<(String, String)>) {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line
            .split_whitespace()
            .nth(1)
            .expect("status")
            .parse()
            .unwrap();
        let mut headers = Vec::new();
        let mut length = 0;
        loop {
            let mut l = String::new();
            self.reader.read_line(&mut l).unwrap();
            let l = l.trim_end();
            if l.is_empty() {
                break;
            }
            let (n, v) = l.split_once(':').unwrap();
            if n.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap();
            }
            headers.push((n.to_string(), v.trim().to_string()));
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        (status, headers)
    }
}
