//! Traffic a failover test runs against an instance: sign-ups, sign-ins and session checks in a
//! loop each, and event streams that reopen when they end, every answer and event recorded with
//! its time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::sse::{self, Ev};
use super::{Client, PASSWORD};

/// One answer: when its request started (since the traffic began), what it was, how it ended.
#[derive(Debug, Clone)]
pub struct Answer {
    pub started: Duration,
    pub ended: Duration,
    pub kind: &'static str,
    pub status: u16,
    pub retry_after: bool,
}

#[derive(Default)]
pub struct Record {
    pub answers: Vec<Answer>,
    /// Addresses whose sign-up was answered 201.
    pub acknowledged: Vec<String>,
}

pub struct Traffic {
    pub t0: Instant,
    /// The organization of the streams' user.
    pub org: i64,
    pub stop: Arc<AtomicBool>,
    pub record: Arc<Mutex<Record>>,
    pub threads: Vec<std::thread::JoinHandle<()>>,
    pub streams: Vec<std::thread::JoinHandle<Vec<(Duration, Ev)>>>,
}

impl Traffic {
    pub fn start(addr: std::net::SocketAddr) -> Traffic {
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let record = Arc::new(Mutex::new(Record::default()));
        let mut member = Client::new(addr);
        let (email, state) = member.signup();
        let org = state["organizations"][0]["id"].as_i64().unwrap();
        let cookie = format!("svc_session={}", member.cookies["svc_session"]);
        let mut threads = Vec::new();
        for kind in ["signup", "signin", "session"] {
            let (stop, record, email) = (stop.clone(), record.clone(), email.clone());
            let mut member = member.clone();
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let started = t0.elapsed();
                    let (r, new) = match kind {
                        "signup" => {
                            let new = super::unique_email();
                            let body = json!({"email": new, "password": PASSWORD, "name": "F"});
                            (Client::new(addr).post("/auth/signup", &body), Some(new))
                        }
                        "signin" => (Client::new(addr).login(&email, PASSWORD), None),
                        _ => (member.get("/auth/session"), None),
                    };
                    let mut rec = record.lock().unwrap();
                    if let (201, Some(new)) = (r.status, new) {
                        rec.acknowledged.push(new);
                    }
                    rec.answers.push(Answer {
                        started,
                        ended: t0.elapsed(),
                        kind,
                        status: r.status,
                        retry_after: r.header("retry-after").is_some(),
                    });
                    drop(rec);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }));
        }
        let streams = (0..3)
            .map(|_| {
                let (stop, cookie) = (stop.clone(), cookie.clone());
                std::thread::spawn(move || stream(addr, &cookie, t0, &stop))
            })
            .collect();
        Traffic {
            t0,
            org,
            stop,
            record,
            threads,
            streams,
        }
    }

    pub fn now(&self) -> Duration {
        self.t0.elapsed()
    }
}

/// One stream's events with their times, reopened whenever it ends, until `stop` and a change
/// with id 9999 has arrived (or 20 s after `stop`).
fn stream(
    addr: std::net::SocketAddr,
    cookie: &str,
    t0: Instant,
    stop: &AtomicBool,
) -> Vec<(Duration, Ev)> {
    let mut seen = Vec::new();
    let mut stopped_at: Option<Instant> = None;
    let mut current: Option<sse::Sse> = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            let at = *stopped_at.get_or_insert_with(Instant::now);
            let done = seen
                .iter()
                .any(|(_, e)| matches!(e, Ev::Change(v) if v["id"] == 9999));
            if done || at.elapsed() > Duration::from_secs(20) {
                return seen;
            }
        }
        let Some(s) = current.as_mut() else {
            let mut s = sse::open(addr, &[("Cookie", cookie)]);
            match s.next(Duration::from_secs(5)) {
                Ev::Ready => {
                    seen.push((t0.elapsed(), Ev::Ready));
                    current = Some(s);
                }
                _ => std::thread::sleep(Duration::from_millis(300)),
            }
            continue;
        };
        match s.next_event(Duration::from_millis(300)) {
            Ev::Timeout => {}
            Ev::End => {
                seen.push((t0.elapsed(), Ev::End));
                current = None;
            }
            e => seen.push((t0.elapsed(), e)),
        }
    }
}
