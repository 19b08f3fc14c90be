//! The UI's live fleet page while a member's API server is stopped (`e2e/stop`) and
//! started again. Destructive: the README's test command runs it after every other test.

mod browser;
mod support;

use std::time::{Duration, Instant};

use browser::{Browser, setup};
use support::{Federation, run_harness};

/// The hub's member grace in this test: a stopped member turns NotReady this long after
/// its last heartbeat.
const MEMBER_GRACE: u32 = 5;

#[tokio::test]
async fn destructive_a_stopped_member_turns_not_ready_on_an_open_fleet_page_and_back() {
    let fed = Federation::connect().await;
    let st = setup(&fed, MEMBER_GRACE);
    let member = fed.member_names()[1].clone();
    let b = Browser::open(st).await;
    b.login("alice-token").await;
    b.goto("/ui/fleet").await;
    let health = |want: &str| {
        format!(
            "var r = document.getElementById('member-{member}'); return !!r && r.dataset.health === '{want}';"
        )
    };
    b.wait_js(
        &format!("{member} Ready\n{}", st.logs()),
        &health("Ready"),
        Duration::from_secs(60),
    )
    .await;
    b.wait_js(
        "the live connection",
        "return document.getElementById('main').dataset.connected === 'true'",
        Duration::from_secs(30),
    )
    .await;
    b.js("window.__notReloaded = true; return true").await;

    let stopped = Instant::now();
    let out = run_harness(&["stop", &member]);
    assert!(
        out.status.success(),
        "stop: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Within the member grace (plus heartbeat and update slack) on the open page.
    let limit = Duration::from_secs(u64::from(MEMBER_GRACE) + 30);
    b.wait_js(
        &format!("{member} NotReady on the open page\n{}", st.logs()),
        &health("NotReady"),
        limit,
    )
    .await;
    let took = stopped.elapsed();
    assert_eq!(
        b.js("return window.__notReloaded === true").await,
        serde_json::json!(true),
        "no reload"
    );
    let cell = b.text(&format!("#member-{member} td.health")).await;
    assert!(cell.starts_with("NotReady"), "{cell}");
    b.screenshot("fleet-member-not-ready").await;
    eprintln!("{member} NotReady on the page {took:?} after the stop");

    let out = run_harness(&["start", &member]);
    assert!(
        out.status.success(),
        "start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Back: Returned (within the failback window), which is Ready again.
    b.wait_js(
        &format!("{member} back on the open page\n{}", st.logs()),
        &format!(
            "var r = document.getElementById('member-{member}'); return !!r && (r.dataset.health === 'Returned' || r.dataset.health === 'Ready');"
        ),
        Duration::from_secs(60),
    )
    .await;
    b.assert_no_console_errors("the fleet page").await;
    b.close().await;
}
