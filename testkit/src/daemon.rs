//! A long-running child process (a `pinfed hub` or agent under test) that dies with the
//! process that started it, with its output in a log file.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::sample::Sample;

/// What dropping a [`Daemon`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDrop {
    /// SIGKILL at once (a test that panicked must not leave it acting on the clusters).
    Kill,
    /// SIGTERM, then SIGKILL after the grace period (a hub releases its Lease).
    Stop(Duration),
}

pub struct Daemon {
    pub name: String,
    pub pid: u32,
    pub log: PathBuf,
    /// The value of its `--metrics-addr` flag, when started with one.
    pub metrics_addr: Option<String>,
    exited: Arc<AtomicBool>,
    on_drop: OnDrop,
}

/// The value after `flag` in `args` (`--flag value`).
pub fn flag_value(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

impl Daemon {
    /// Starts `cmd` with stdin closed and stdout and stderr into `log` (created anew).
    ///
    /// The child is spawned from a thread that lives as long as this process, with
    /// `PR_SET_PDEATHSIG` = SIGKILL: it dies with this process however that ends (the signal
    /// follows the parent *thread*, so that thread never exits). Dropping the handle acts as
    /// [`OnDrop::Kill`] unless [`Daemon::on_drop`] says otherwise.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> anyhow::Result<Daemon> {
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let program = cmd.get_program().to_string_lossy().into_owned();
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let metrics_addr = flag_value(&args, "--metrics-addr");
        let exited = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let flag = exited.clone();
        std::thread::Builder::new()
            .name(format!("daemon-{name}"))
            .spawn(move || {
                let mut child = match cmd.spawn() {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let _ = tx.send(Ok(child.id()));
                let _ = child.wait();
                flag.store(true, Ordering::SeqCst);
                // Keep the thread (the parent of the daemon) alive until the process ends.
                loop {
                    std::thread::park();
                }
            })?;
        let pid = rx
            .recv()
            .context("the spawning thread ended")?
            .with_context(|| format!("starting {program}"))?;
        Ok(Daemon {
            name: name.to_string(),
            pid,
            log: log.to_path_buf(),
            metrics_addr,
            exited,
            on_drop: OnDrop::Kill,
        })
    }

    pub fn on_drop(mut self, on_drop: OnDrop) -> Daemon {
        self.on_drop = on_drop;
        self
    }

    /// False once the process has exited (and been reaped).
    pub fn alive(&self) -> bool {
        !self.exited.load(Ordering::SeqCst)
    }

    /// Sends `sig` while the process runs (never to a pid that may have been reused).
    pub fn signal(&self, sig: i32) {
        if self.alive() {
            // SAFETY: kill(2) with a pid this handle owns.
            unsafe { libc::kill(self.pid as i32, sig) };
        }
    }

    /// SIGKILL.
    pub fn kill(&self) {
        self.signal(libc::SIGKILL);
    }

    /// SIGTERM, then SIGKILL after `grace`; returns once the process has exited.
    pub fn stop(&self, grace: Duration) {
        self.signal(libc::SIGTERM);
        let start = Instant::now();
        while self.alive() && start.elapsed() < grace {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        while self.alive() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Memory and CPU of the process, while it runs.
    pub fn sample(&self) -> Option<Sample> {
        if !self.alive() {
            return None;
        }
        Sample::of(self.pid)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the log.
    pub fn log_last(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The last 40 lines of the log (for failure messages).
    pub fn log_tail(&self) -> String {
        self.log_last(40)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        match self.on_drop {
            OnDrop::Kill => self.kill(),
            OnDrop::Stop(grace) => self.stop(grace),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_daemon_logs_and_is_seen_to_exit() {
        let log = std::env::temp_dir().join(format!("{}.log", crate::unique_name("tk-exit")));
        let d = Daemon::spawn("exit", sh("echo one; echo two >&2"), &log).unwrap();
        let start = Instant::now();
        while d.alive() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!d.alive(), "sh should have exited");
        assert_eq!(d.log_last(2), "one\ntwo");
        assert_eq!(d.sample(), None);
        let _ = std::fs::remove_file(log);
    }

    #[test]
    fn stop_terminates_and_drop_kills() {
        let log = std::env::temp_dir().join(format!("{}.log", crate::unique_name("tk-stop")));
        let d = Daemon::spawn("sleep", sh("exec sleep 60"), &log).unwrap();
        assert!(d.alive());
        assert!(d.sample().is_some_and(|s| s.rss_bytes > 0));
        d.stop(Duration::from_secs(5));
        assert!(!d.alive());

        let d = Daemon::spawn("sleep", sh("exec sleep 60"), &log).unwrap();
        let pid = d.pid;
        drop(d);
        let start = Instant::now();
        while crate::sample::running(pid) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !crate::sample::running(pid),
            "dropping the handle kills the daemon"
        );
        let _ = std::fs::remove_file(log);
    }
}
