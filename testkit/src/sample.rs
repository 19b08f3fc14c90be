//! What a process uses, read through `procfs`.

use procfs::process::Process;

/// One reading of a process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Resident memory now (VmRSS), bytes.
    pub rss_bytes: u64,
    /// Peak resident memory (VmHWM), bytes.
    pub peak_rss_bytes: u64,
    /// User plus system CPU time so far, seconds.
    pub cpu_secs: f64,
}

impl Sample {
    /// Reads `pid`; None if it does not run (or is a zombie).
    pub fn of(pid: u32) -> Option<Sample> {
        let p = Process::new(pid as i32).ok()?;
        let stat = p.stat().ok()?;
        if matches!(stat.state, 'Z' | 'X') {
            return None;
        }
        let status = p.status().ok()?;
        let ticks = procfs::ticks_per_second() as f64;
        Some(Sample {
            rss_bytes: status.vmrss? * 1024,
            peak_rss_bytes: status.vmhwm? * 1024,
            cpu_secs: (stat.utime + stat.stime) as f64 / ticks,
        })
    }

    pub fn rss_mib(&self) -> u64 {
        self.rss_bytes >> 20
    }

    pub fn peak_rss_mib(&self) -> u64 {
        self.peak_rss_bytes >> 20
    }
}

/// Whether `pid` runs (exists and is not a zombie).
pub fn running(pid: u32) -> bool {
    Process::new(pid as i32)
        .and_then(|p| p.stat())
        .is_ok_and(|s| !matches!(s.state, 'Z' | 'X'))
}

/// The command line of `pid` joined with spaces, if it can be read.
pub fn cmdline(pid: u32) -> Option<String> {
    Some(Process::new(pid as i32).ok()?.cmdline().ok()?.join(" "))
}

/// Every pid on the machine.
pub fn all_pids() -> Vec<u32> {
    procfs::process::all_processes()
        .map(|it| it.filter_map(|p| p.ok()).map(|p| p.pid as u32).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_cpu_and_a_command_line() {
        let me = std::process::id();
        // Burn a little CPU so the reading is not all zeros on a fast machine.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let s = Sample::of(me).expect("this process runs");
        assert!(s.rss_bytes > 1 << 20, "{s:?}");
        assert!(s.peak_rss_bytes >= s.rss_bytes, "{s:?}");
        assert!(s.cpu_secs >= 0.0, "{s:?}");
        assert!(running(me));
        assert!(all_pids().contains(&me));
        let cmd = cmdline(me).unwrap();
        assert!(!cmd.is_empty());
    }

    #[test]
    fn a_pid_that_does_not_run_has_no_sample() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(Sample::of(pid), None);
        assert!(!running(pid));
    }
}
