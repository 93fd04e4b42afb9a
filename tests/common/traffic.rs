//! Traffic a failover test runs against an instance: sign-ups, sign-ins and session checks in a
//! loop each, and event streams that reopen when they end, every answer and event recorded with
//! its time.

use std::collections::HashMap;
use std::path::Path;
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

/// When a switch began, when the new primary took writes, and when the last step of it (the old
/// primary stopped) was taken, since the traffic began.
pub struct Switch {
    pub began: Duration,
    pub promoted: Duration,
    pub last_event: Duration,
}

impl Traffic {
    /// Stops the traffic, announces a change on the new primary (`sql` runs a statement in the
    /// consoled database there) and checks what a failover must keep: no 500, a 503 only with
    /// `Retry-After` and only for requests in flight during the switch, the first sign-up within
    /// 5 s of the promotion, every stream told to resync (or ended) and then hearing the new
    /// primary, no acknowledged sign-up lost, every one's mail written (duplicates counted).
    pub fn finish_and_check(self, switch: &Switch, sql: &dyn Fn(&str) -> String, mail_dir: &Path) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().unwrap();
        }
        sql(&format!(
            "SELECT consoled_notify_change('organization', 9999, 'update', NULL, {})",
            self.org
        ));
        let streams: Vec<_> = self
            .streams
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let record = self.record.lock().unwrap();
        check_answers(&record.answers, switch);
        for (i, events) in streams.iter().enumerate() {
            let told = events
                .iter()
                .any(|(t, e)| *t >= switch.began && matches!(e, Ev::Resync | Ev::End));
            let heard = events
                .iter()
                .any(|(_, e)| matches!(e, Ev::Change(v) if v["id"] == 9999));
            assert!(told && heard, "stream {i}: {events:?}");
        }
        check_signups_and_mail(&record.acknowledged, sql, mail_dir);
    }
}

fn check_answers(answers: &[Answer], switch: &Switch) {
    let mut by_status: HashMap<(&str, u16), usize> = HashMap::new();
    for a in answers {
        *by_status.entry((a.kind, a.status)).or_default() += 1;
    }
    eprintln!("answers by kind and status: {by_status:?}");
    for a in answers {
        assert!(matches!(a.status, 200 | 201 | 503), "{a:?}");
        if a.status == 503 {
            assert!(a.retry_after, "a 503 without Retry-After: {a:?}");
            assert!(
                a.ended >= switch.began && a.started <= switch.last_event + Duration::from_secs(4),
                "a 503 outside the switch ({:?} to {:?}): {a:?}",
                switch.began,
                switch.last_event
            );
        }
    }
    let first = answers
        .iter()
        .filter(|a| a.kind == "signup" && a.started >= switch.promoted && a.status == 201)
        .map(|a| a.ended)
        .min()
        .expect("no sign-up succeeded after the promotion");
    let after = first - switch.promoted;
    eprintln!("first sign-up after the promotion: {after:?} after it");
    assert!(after < Duration::from_secs(5), "{after:?}");
}

fn check_signups_and_mail(acknowledged: &[String], sql: &dyn Fn(&str) -> String, mail_dir: &Path) {
    let quoted: Vec<String> = acknowledged.iter().map(|e| format!("'{e}'")).collect();
    let found = sql(&format!(
        "SELECT count(*) FROM users WHERE email IN ({})",
        quoted.join(",")
    ));
    assert_eq!(
        found,
        acknowledged.len().to_string(),
        "acknowledged sign-ups lost"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while sql("SELECT count(*) FROM outbox") != "0" {
        assert!(Instant::now() < deadline, "the outbox never emptied");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mails = mails_by_recipient(mail_dir);
    let missing: Vec<&String> = acknowledged
        .iter()
        .filter(|e| !mails.contains_key(*e))
        .collect();
    let duplicates: usize = mails.values().map(|n| n - 1).sum();
    eprintln!(
        "{} sign-ups acknowledged, {} mails written, {duplicates} duplicates",
        acknowledged.len(),
        mails.values().sum::<usize>()
    );
    assert!(missing.is_empty(), "no mail for {missing:?}");
}

/// `.eml` files written per recipient.
fn mails_by_recipient(dir: &Path) -> HashMap<String, usize> {
    let mut count = HashMap::new();
    for entry in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if let Some(to) = text.lines().find_map(|l| l.strip_prefix("To: ")) {
            let to = to.trim().trim_matches(['<', '>']).to_string();
            *count.entry(to).or_insert(0) += 1;
        }
    }
    count
}
