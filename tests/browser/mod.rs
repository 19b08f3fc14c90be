//! The web UI's test kit: the federation with a JSS serving the UI (hub, agents and JSS
//! as local processes), chromedriver, and a headless Chromium session per test driven
//! with fantoccini. Shared by `e2e_ui.rs` and `destructive_ui.rs`.
//!
//! Chromium comes from Debian's `chromium` and `chromium-driver` (`e2e/browser/install`
//! installs them); a missing browser fails the test with that hint, it never skips.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::support::{
    Daemon, Federation, free_port, join_all, spawn_agents, spawn_daemon, unique_name,
};

/// Users of the UI tests and their teams: `ads` and `reviewed` share the `ui-ads-*`
/// namespaces (only `ads` may change what `ads` owns), `search` has `ui-search-*`,
/// `platform` is an admin team (sees everything, may drain members).
pub const TOKENS: &str = r#"
tokens:
  - {user: alice, token: alice-token, teams: [ads]}
  - {user: bob, token: bob-token, teams: [search]}
  - {user: carol, token: carol-token, teams: [reviewed]}
  - {user: dana, token: dana-token, teams: [platform]}
teams:
  platform: {namespaces: [], admin: true}
  ads: {namespaces: ["ui-ads-*"], inline: true}
  search: {namespaces: ["ui-search-*"], inline: true}
  reviewed: {namespaces: ["ui-ads-*"], inline: false}
"#;

/// Hub, agents, a JSS with the UI, and chromedriver, for the whole test binary.
pub struct Setup {
    pub daemons: Vec<Daemon>,
    /// `http://127.0.0.1:PORT` of the JSS.
    pub server: String,
    /// `http://127.0.0.1:PORT` of chromedriver.
    pub driver: String,
    pub chromium: PathBuf,
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn wait_listening(addr: &str, what: &str, log: impl Fn() -> String) {
    for _ in 0..600 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("nothing listens on {addr} ({what})\n{}", log());
}

fn find_program(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Starts chromedriver on a loopback port; it dies with the test process.
fn spawn_chromedriver(driver: PathBuf, port: u16) -> PathBuf {
    use std::os::unix::process::CommandExt;
    let log = std::env::temp_dir().join(format!("{}.log", unique_name("chromedriver")));
    let log2 = log.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let out = std::fs::File::create(&log2).expect("chromedriver log");
        let mut cmd = std::process::Command::new(&driver);
        cmd.arg(format!("--port={port}"))
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", driver.display()));
        tx.send(()).unwrap();
        let _ = child.wait();
        loop {
            std::thread::park();
        }
    });
    rx.recv().expect("chromedriver started");
    log
}

/// The federation with the UI; `member_grace_secs` is the hub's (the first caller's wins).
pub fn setup(fed: &Federation, member_grace_secs: u32) -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let hint = "run e2e/browser/install (installs Debian's chromium and chromium-driver), \
                    or set PINFED_CHROMEDRIVER and PINFED_CHROMIUM";
        let driver = find_program("PINFED_CHROMEDRIVER", &["chromedriver"])
            .unwrap_or_else(|| panic!("chromedriver not found: {hint}"));
        let chromium = find_program("PINFED_CHROMIUM", &["chromium", "chromium-browser"])
            .unwrap_or_else(|| panic!("chromium not found: {hint}"));
        join_all(fed);
        let mut daemons = vec![spawn_daemon(
            fed,
            "hub",
            &[
                s(&[
                    "hub",
                    "--context",
                    "hub",
                    "--no-leader-election",
                    "--heartbeat-secs",
                    "1",
                ]),
                vec![
                    "--member-grace-secs".into(),
                    member_grace_secs.to_string(),
                    "--metrics-addr".into(),
                    format!("127.0.0.1:{}", free_port()),
                ],
            ]
            .concat(),
        )];
        daemons.extend(spawn_agents(fed));
        let dir = std::env::temp_dir().join(unique_name("pinfed-ui"));
        let artifacts = dir.join("artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        std::fs::write(dir.join("tokens.yaml"), TOKENS).unwrap();
        // Token files must be private to their owner (the JSS refuses others).
        std::fs::set_permissions(
            dir.join("tokens.yaml"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let api = format!("127.0.0.1:{}", free_port());
        let jss = spawn_daemon(
            fed,
            "jss-ui",
            &[
                s(&["jss", "--context", "hub"]),
                vec![
                    "--listen".into(),
                    api.clone(),
                    "--metrics-addr".into(),
                    format!("127.0.0.1:{}", free_port()),
                    "--tokens".into(),
                    dir.join("tokens.yaml").display().to_string(),
                    "--artifacts".into(),
                    artifacts.display().to_string(),
                ],
            ]
            .concat(),
        );
        wait_listening(&api, "the JSS", || jss.log_tail());
        daemons.push(jss);
        let port = free_port();
        let log = spawn_chromedriver(driver, port);
        let addr = format!("127.0.0.1:{port}");
        wait_listening(&addr, "chromedriver", || {
            std::fs::read_to_string(&log).unwrap_or_default()
        });
        Setup {
            daemons,
            server: format!("http://{api}"),
            driver: format!("http://{addr}"),
            chromium,
        }
    })
}

impl Setup {
    pub fn logs(&self) -> String {
        format!(
            "--- hub ---\n{}\n--- jss ---\n{}",
            self.daemons[0].log_tail(),
            self.daemons.last().unwrap().log_tail()
        )
    }

    /// A JSS API client with a user's token.
    pub fn api(&self, token: &str) -> pinfed::jss::client::JssClient {
        pinfed::jss::client::JssClient::new(&self.server, Some(token.to_string()), None).unwrap()
    }

    /// Submits an inline resource through the JSS API; panics with the answer if refused.
    pub async fn submit(&self, token: &str, namespace: &str, resource: &Value) {
        let r = self
            .api(token)
            .post_json(
                "/v1/submissions",
                &json!({"resource": resource, "namespace": namespace}),
            )
            .await
            .unwrap();
        assert!(r.is_success(), "submission refused: {}", r.error_text());
    }
}

/// Browsers open at once at most (each Chromium takes a core while it lays out pages).
static BROWSERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Chromium's console log (chromedriver's `goog:loggingPrefs`).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }
    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}

/// One headless Chromium with a fresh profile.
pub struct Browser {
    pub c: Client,
    pub base: String,
    /// Console messages read so far that are errors.
    errors: std::sync::Mutex<Vec<String>>,
    _slot: tokio::sync::SemaphorePermit<'static>,
    profile: PathBuf,
}

/// Where the screenshots of the docs go.
pub fn screenshot_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ui"))
}

impl Browser {
    pub async fn open(st: &Setup) -> Browser {
        let slot = BROWSERS.acquire().await.expect("semaphore");
        let profile = std::env::temp_dir().join(unique_name("chromium-profile"));
        std::fs::create_dir_all(&profile).unwrap();
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": st.chromium.display().to_string(),
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1360,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let caps = match caps {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&st.driver)
            .await
            .unwrap_or_else(|e| {
                panic!("a Chromium session from chromedriver at {}: {e}", st.driver)
            });
        Browser {
            c,
            base: st.server.clone(),
            errors: Default::default(),
            _slot: slot,
            profile,
        }
    }

    pub async fn goto(&self, path: &str) {
        self.c
            .goto(&format!("{}{path}", self.base))
            .await
            .unwrap_or_else(|e| panic!("opening {path}: {e}"));
    }

    /// Finds the element with `id` and does `act` with it. A live page swaps its content
    /// when the federation changes, which can replace the element between finding and
    /// acting on it ("stale element"): find it again, for up to 10 s; then panic with
    /// `what` and the last error.
    async fn on_id<F, Fut>(&self, id: &str, what: &str, act: F)
    where
        F: Fn(fantoccini::elements::Element) -> Fut,
        Fut: std::future::Future<Output = Result<(), fantoccini::error::CmdError>>,
    {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let done = match self.c.find(Locator::Id(id)).await {
                Ok(e) => act(e).await,
                Err(e) => Err(e),
            };
            match done {
                Ok(()) => return,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("{what}: {e}"),
            }
        }
    }

    /// Clicks the element with `id` (found again if the live page replaced it).
    pub async fn click_id(&self, id: &str) {
        self.on_id(id, &format!("clicking #{id}"), |e| async move {
            e.click().await.map(|_| ())
        })
        .await
    }

    /// Chooses `value` in the select `#id` (found again if the live page replaced it).
    pub async fn select_id(&self, id: &str, value: &str) {
        self.on_id(id, &format!("choosing {value} in #{id}"), |e| async move {
            e.select_by_value(value).await.map(|_| ())
        })
        .await
    }

    pub async fn path(&self) -> String {
        let u = self.c.current_url().await.unwrap();
        match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_string(),
        }
    }

    /// Logs in through the form and checks it landed on `next` (a page of the UI).
    pub async fn login(&self, token: &str) {
        self.goto("/ui/login").await;
        self.c
            .find(Locator::Id("token"))
            .await
            .unwrap()
            .send_keys(token)
            .await
            .unwrap();
        self.c
            .find(Locator::Id("login"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        self.wait_js(
            "the page after the login",
            "return location.pathname !== '/ui/login'",
            Duration::from_secs(15),
        )
        .await;
    }

    /// Runs a script and returns its value.
    pub async fn js(&self, script: &str) -> Value {
        self.c
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The text of the first element matching `css` (empty when there is none).
    pub async fn text(&self, css: &str) -> String {
        let script = format!(
            "var e = document.querySelector({}); return e ? e.innerText : '';",
            Value::String(css.into())
        );
        self.js(&script)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Polls a script until it returns true; panics with what it waited for.
    pub async fn wait_js(&self, what: &str, script: &str, timeout: Duration) {
        let start = Instant::now();
        loop {
            if self.js(script).await == Value::Bool(true) {
                return;
            }
            if start.elapsed() > timeout {
                let body = self.text("body").await;
                panic!(
                    "timed out after {timeout:?} waiting for {what} on {}\n--- page ---\n{body}",
                    self.path().await
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// A POST from the page's own script (same origin, the session cookie rides along);
    /// returns the status and body.
    pub async fn post_from_page(&self, path: &str, form: &[(&str, &str)]) -> (u16, String) {
        let body: Vec<String> = form.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let script = format!(
            "var done = arguments[arguments.length - 1];
             fetch({}, {{method: 'POST', credentials: 'same-origin', redirect: 'manual',
                headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: {}}})
               .then(function (r) {{ return r.text().then(function (t) {{ done([r.status, t]); }}); }})
               .catch(function (e) {{ done([0, String(e)]); }});",
            Value::String(path.into()),
            Value::String(body.join("&"))
        );
        let v = self.c.execute_async(&script, vec![]).await.unwrap();
        (
            v[0].as_u64().unwrap_or(0) as u16,
            v[1].as_str().unwrap_or_default().to_string(),
        )
    }

    /// The session cookie's value (HttpOnly: scripts cannot read it; WebDriver can).
    pub async fn session_cookie(&self) -> String {
        self.c
            .get_named_cookie("pinfed_session")
            .await
            .expect("a session cookie")
            .value()
            .to_string()
    }

    /// Errors on the console since the last call (each message once).
    pub async fn console_errors(&self) -> Vec<String> {
        let v = self
            .c
            .issue_cmd(BrowserLog)
            .await
            .expect("the browser's console log");
        let new: Vec<String> = v
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect();
        self.errors.lock().unwrap().extend(new.iter().cloned());
        new
    }

    /// Fails on any console error so far.
    pub async fn assert_no_console_errors(&self, page: &str) {
        let errors = self.console_errors().await;
        assert!(errors.is_empty(), "console errors on {page}: {errors:#?}");
    }

    /// Fails on console errors other than the expected ones (a refused request is a
    /// failed load on the console: `... responded with a status of 403`).
    pub async fn assert_console_errors_only(&self, page: &str, expected: &[&str]) {
        let errors = self.console_errors().await;
        let other: Vec<&String> = errors
            .iter()
            .filter(|e| !expected.iter().any(|x| e.contains(x)))
            .collect();
        assert!(other.is_empty(), "console errors on {page}: {other:#?}");
    }

    /// Saves a PNG of the viewport as `docs/ui/NAME.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.c.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    pub async fn close(self) {
        let _ = self.c.close().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// A raw HTTP/1.1 request to the JSS (for what a browser would never send); returns the
/// status line's code and the whole response.
pub async fn raw_request(server: &str, request: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}
