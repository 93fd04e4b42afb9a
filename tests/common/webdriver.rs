//! A small W3C WebDriver client over ureq, driving Debian's headless chromium through
//! chromedriver: just what the browser end-to-end test needs (navigate, find, type, click, read,
//! cookies, screenshot). Chromedriver and its browser are stopped on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

/// The key under which WebDriver names an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Whether the browser and its driver are installed (scripts/e2e-deps.sh installs them).
pub fn available() -> bool {
    Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists()
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().unwrap().port()
}

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    agent: ureq::Agent,
    profile: PathBuf,
}

impl Browser {
    /// Starts chromedriver and a headless chromium with a fresh profile and no background
    /// network traffic (the machine reaches nothing but package registries).
    pub fn start() -> Browser {
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let profile =
            std::env::temp_dir().join(format!("consoled-e2e-profile-{}", super::unique()));
        let mut browser = Browser {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            session: String::new(),
            agent,
            profile,
        };
        browser.wait_for_driver();
        browser.session = browser.new_session();
        browser
    }

    fn wait_for_driver(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status = self.call("GET", &format!("{}/status", self.base), None);
            if status.is_ok_and(|v| v["value"]["ready"] == true) {
                return;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn new_session(&self) -> String {
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1100,900",
            &format!("--user-data-dir={}", self.profile.display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let v = self
            .call("POST", &format!("{}/session", self.base), Some(caps))
            .unwrap_or_else(|e| panic!("new WebDriver session: {e}"));
        v["value"]["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string()
    }

    /// One WebDriver command; the answer's JSON, or the WebDriver error as text.
    fn call(&self, method: &str, url: &str, body: Option<Value>) -> Result<Value, String> {
        let result = match (method, body) {
            ("GET", _) => self.agent.get(url).call(),
            ("DELETE", _) => self.agent.delete(url).call(),
            (_, body) => self.agent.post(url).send_json(body.unwrap_or(json!({}))),
        };
        let mut response = result.map_err(|e| format!("{method} {url}: {e}"))?;
        let status = response.status().as_u16();
        let value: Value = response
            .body_mut()
            .read_json()
            .map_err(|e| format!("{method} {url}: {e}"))?;
        if status != 200 {
            return Err(format!("{method} {url}: {status} {}", value["value"]));
        }
        Ok(value)
    }

    /// A command on this session; panics with the WebDriver error.
    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut answer = self
            .call(method, &url, body)
            .unwrap_or_else(|e| panic!("{e}"));
        answer["value"].take()
    }

    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    /// The element matching a CSS selector, if there is one now.
    pub fn find(&self, css: &str) -> Option<String> {
        let url = format!("{}/session/{}/element", self.base, self.session);
        let body = json!({"using": "css selector", "value": css});
        let v = self.call("POST", &url, Some(body)).ok()?;
        v["value"][ELEMENT].as_str().map(str::to_string)
    }

    fn element(&self, css: &str) -> String {
        self.find(css)
            .unwrap_or_else(|| panic!("no element matches {css:?}"))
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.cmd("POST", &format!("/element/{id}/clear"), None);
        self.cmd(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        );
    }

    pub fn click(&self, css: &str) {
        let id = self.element(css);
        self.cmd("POST", &format!("/element/{id}/click"), None);
    }

    /// The rendered text of the first element matching `css` ("" when hidden or absent).
    pub fn text(&self, css: &str) -> String {
        let Some(id) = self.find(css) else {
            return String::new();
        };
        let url = format!("{}/session/{}/element/{id}/text", self.base, self.session);
        self.call("GET", &url, None)
            .ok()
            .and_then(|v| v["value"].as_str().map(str::to_string))
            .unwrap_or_default()
    }

    pub fn displayed(&self, css: &str) -> bool {
        let Some(id) = self.find(css) else {
            return false;
        };
        let url = format!(
            "{}/session/{}/element/{id}/displayed",
            self.base, self.session
        );
        self.call("GET", &url, None)
            .is_ok_and(|v| v["value"] == true)
    }

    /// Waits up to `limit` for `check` to hold; panics with `what` otherwise.
    pub fn wait(&self, what: &str, limit: Duration, check: impl Fn(&Browser) -> bool) {
        assert!(
            self.try_wait(limit, check),
            "timed out after {limit:?} waiting for {what}"
        );
    }

    /// Whether `check` held within `limit`.
    pub fn try_wait(&self, limit: Duration, check: impl Fn(&Browser) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        while !check(self) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        true
    }

    /// The value of a cookie the browser holds for the current page (HttpOnly ones too).
    pub fn cookie(&self, name: &str) -> Option<String> {
        let url = format!("{}/session/{}/cookie/{name}", self.base, self.session);
        let v = self.call("GET", &url, None).ok()?;
        v["value"]["value"].as_str().map(str::to_string)
    }

    /// Saves a PNG of the viewport.
    pub fn screenshot(&self, path: &Path) {
        let b64 = self.cmd("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().expect("base64 screenshot"))
            .expect("screenshot is base64");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create the screenshot folder");
        }
        std::fs::write(path, png).expect("write the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let url = format!("{}/session/{}", self.base, self.session);
            let _ = self.call("DELETE", &url, None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
