//! Processes that outlive the command that started them (the e2e harness's etcd, API
//! servers, controller-managers, schedulers, kwok): each in its own process group with its
//! output appended to a log, tracked by pid, and only ever signalled after checking that the
//! pid still runs one of our commands — its command line mentions a marker (the harness's
//! state directory).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::sample;

/// Starts `argv` in its own process group (a Ctrl-C aimed at the caller does not reach
/// it), stdin closed, stdout and stderr appended to `log`. Returns its pid.
pub fn spawn(argv: &[String], log: &Path) -> anyhow::Result<u32> {
    spawn_with_env(argv, log, &[])
}

/// [`spawn`], with `env` set for the child on top of the caller's environment.
pub fn spawn_with_env(argv: &[String], log: &Path, env: &[(&str, String)]) -> anyhow::Result<u32> {
    let (program, args) = argv.split_first().context("an empty command line")?;
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let err = out.try_clone()?;
    let child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    Ok(child.id())
}

/// True if `pid` runs (not a zombie) and its command line contains `marker`.
pub fn is_ours(pid: u32, marker: &str) -> bool {
    sample::running(pid) && sample::cmdline(pid).is_some_and(|c| c.contains(marker))
}

/// Every other process whose command line contains `marker`.
pub fn pids_with(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    sample::all_pids()
        .into_iter()
        .filter(|&pid| pid != me && is_ours(pid, marker))
        .collect()
}

/// SIGTERM, then SIGKILL after `grace`; returns once the process is gone. Does nothing if
/// `pid` no longer runs one of our commands.
pub fn stop(pid: u32, marker: &str, grace: Duration) {
    if !is_ours(pid, marker) {
        return;
    }
    // SAFETY: kill(2) of a pid just checked to run our command.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        reap(pid);
        if !is_ours(pid, marker) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: as above; it still runs our command.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    while is_ours(pid, marker) {
        reap(pid);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Collects an exited child of ours so it does not linger as a zombie.
fn reap(pid: u32) {
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG on a pid; fails harmlessly if it is not our child.
    unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detached_process_is_found_by_its_marker_and_stopped() {
        // `tail -f FILE` runs until stopped, with the file's unique path as its marker.
        let watched = std::env::temp_dir().join(crate::unique_name("tk-marker"));
        std::fs::write(&watched, "").unwrap();
        let marker = watched.display().to_string();
        let log = std::env::temp_dir().join(format!("{}.log", crate::unique_name("tk-det")));
        let argv: Vec<String> = ["sh", "-c", "echo up; exec tail -f \"$0\"", &marker]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let pid = spawn(&argv, &log).unwrap();
        // Until it has exec'd `tail`, the child is a copy of this process or the shell (and
        // while exec replaces the image its command line reads empty for a moment).
        let settled = |pid| {
            is_ours(pid, &marker) && sample::cmdline(pid).is_some_and(|c| c.starts_with("tail"))
        };
        let start = Instant::now();
        while !settled(pid) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(is_ours(pid, &marker));
        assert!(!is_ours(pid, "some-other-marker"));
        assert_eq!(pids_with(&marker), vec![pid]);
        stop(pid, &marker, Duration::from_secs(5));
        assert!(!is_ours(pid, &marker));
        assert!(pids_with(&marker).is_empty());
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "up\n");
        let _ = std::fs::remove_file(log);
        let _ = std::fs::remove_file(watched);
    }
}
