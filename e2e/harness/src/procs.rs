//! Detached component processes: spawned in their own process group with output to a
//! log file, tracked by pid, and only ever signalled after checking that the pid still
//! runs one of our commands (its command line mentions the state directory).

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

pub fn spawn(argv: &[String], log: &Path) -> anyhow::Result<u32> {
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let err = out.try_clone()?;
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Own process group: a Ctrl-C aimed at the caller does not take the cluster down.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", argv[0]))?;
    Ok(child.id())
}

/// True if `pid` is alive (not a zombie) and its command line contains `marker`.
pub fn is_ours(pid: u32, marker: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state letter follows the parenthesised command name.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, Some('Z') | Some('X') | None) {
        return false;
    }
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains(marker))
        .unwrap_or(false)
}

/// Resident memory of a process in bytes, if it runs.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// SIGTERM, then SIGKILL after `grace`; returns once the process is gone.
pub fn stop(pid: u32, marker: &str, grace: Duration) {
    if !is_ours(pid, marker) {
        return;
    }
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        reap(pid);
        if !is_ours(pid, marker) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    while is_ours(pid, marker) {
        reap(pid);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Collects our own exited children so they do not linger as zombies.
fn reap(pid: u32) {
    unsafe {
        let mut status = 0;
        libc::waitpid(pid as i32, &mut status, libc::WNOHANG);
    }
}

/// `n` distinct free loopback ports (all listeners are held until every port is chosen).
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    Ok(listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()?)
}

/// Whether something accepts TCP connections on 127.0.0.1:port.
pub fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
        .is_ok()
}
