//! The `pinfed hub` and `pinfed agent` processes of a scenario: testkit daemons (they die
//! with this process; dropping one stops it with SIGTERM, then SIGKILL after 10 s, so a hub
//! releases its Lease), with their metrics address and log summaries.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use testkit::Sample;

pub struct Daemon {
    inner: testkit::Daemon,
}

impl Deref for Daemon {
    type Target = testkit::Daemon;
    fn deref(&self) -> &testkit::Daemon {
        &self.inner
    }
}

impl Daemon {
    pub fn new(inner: testkit::Daemon) -> Daemon {
        Daemon { inner }
    }

    /// (VmHWM, VmRSS) in KiB.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        self.sample()
            .map(|s: Sample| (s.peak_rss_bytes >> 10, s.rss_bytes >> 10))
    }

    /// User + system CPU seconds so far.
    pub fn cpu_secs(&self) -> Option<f64> {
        self.sample().map(|s| s.cpu_secs)
    }

    /// Waits until the daemon answers 200 on `path` of its metrics address.
    pub async fn wait_http(&self, path: &str, timeout: Duration) -> anyhow::Result<()> {
        let addr = self.metrics_addr.clone().context("no metrics address")?;
        let start = Instant::now();
        loop {
            if http_status(&addr, path).await == Some(200) {
                return Ok(());
            }
            if !self.alive() {
                bail!("{} exited:\n{}", self.name, self.log_last(30));
            }
            if start.elapsed() > timeout {
                bail!(
                    "{} did not answer {path} within {timeout:?}:\n{}",
                    self.name,
                    self.log_last(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Warnings and errors of the log, counted by message (timestamps and fields cut).
    fn problems(&self) -> Vec<(usize, String)> {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for line in self.log_text().lines() {
            let Some(level) = [" WARN ", " ERROR "].iter().find(|l| line.contains(**l)) else {
                continue;
            };
            let after = line.split_once(level).map(|x| x.1).unwrap_or(line);
            // "target: message key=value ..." -> "target: message"
            let msg: String = after.chars().take(160).collect();
            let key = match msg.find('=') {
                Some(i) => msg[..i]
                    .rsplit_once(' ')
                    .map(|x| x.0)
                    .unwrap_or(&msg)
                    .to_string(),
                None => msg,
            };
            *counts.entry(format!("{}{key}", level.trim())).or_default() += 1;
        }
        let mut v: Vec<(usize, String)> = counts.into_iter().map(|(k, n)| (n, k)).collect();
        v.sort_by_key(|x| std::cmp::Reverse(x.0));
        v
    }
}

pub fn report_logs(daemons: &[&Daemon]) {
    for d in daemons {
        let problems = d.problems();
        if problems.is_empty() {
            println!("  log {}: no warnings or errors", d.name);
            continue;
        }
        println!("  log {} ({}):", d.name, d.log.display());
        for (n, msg) in problems.iter().take(8) {
            println!("    {n:>6} × {msg}");
        }
    }
}

/// The status code of a GET of `path` on a loopback `addr` (host:port), if it answers
/// within 2 s.
pub async fn http_status(addr: &str, path: &str) -> Option<u16> {
    testkit::http::status(&format!("http://{addr}{path}"), Duration::from_secs(2)).await
}
