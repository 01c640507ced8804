//! The release `tc-queue` binary as a process of its own, for benches that measure what users
//! run (`cargo build --release -p functions --bin tc-queue` first).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The workspace's target directory (`CARGO_TARGET_DIR`, else `target/`).
pub fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// Starts a `tc-queue` process (`BENCH_SERVER_BIN`, else the release build) on `port` over
/// `dir`, with the suite's root token and `envs`.
pub fn spawn(port: u16, dir: &Path, envs: &[(&str, String)]) -> Child {
    let bin = std::env::var("BENCH_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| target_dir().join("release/tc-queue"));
    Command::new(&bin)
        .env("TCQ_PORT", port.to_string())
        .env("TCQ_DATA_DIR", dir)
        .env("TCQ_ROOT_ACCESS_TOKEN", crate::ROOT_ACCESS_TOKEN)
        .env("RUST_LOG", "warn,lapin=off")
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo build --release first)", bin.display()))
}

/// A `tc-queue` process (see [`spawn`]), killed when dropped.
pub struct ReleaseServer {
    child: Child,
    /// Its root URL.
    pub root: String,
}

impl ReleaseServer {
    /// Starts one on a free port over `dir`, with the suite's root token and `envs`, and waits
    /// until it answers.
    pub async fn start(dir: &Path, envs: &[(&str, String)]) -> ReleaseServer {
        let port = crate::free_port();
        let child = spawn(port, dir, envs);
        let root = format!("http://127.0.0.1:{port}");
        assert!(
            crate::wait_until_up(&root, Duration::from_secs(60)).await,
            "tc-queue did not come up"
        );
        ReleaseServer { child, root }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ReleaseServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time (user + system) a process has used, every thread it ever ran included; `None`
/// where there is no such process. Read from the process's CPU clock, in nanoseconds, where
/// the kernel gives it (Linux does for any process): `/proc/<pid>/stat` counts in 10 ms
/// ticks, ±0.05 ms over 200 calls, too coarse to tell a 5 % change in a 1.5 ms invocation.
pub fn cpu_time(pid: &str) -> Option<Duration> {
    cpu_clock(pid).or_else(|| {
        let f = stat_fields(pid)?;
        Some(ticks(f.get(11)? + f.get(12)?))
    })
}

/// The process's CPU clock (`clock_getcpuclockid`): the scheduler's own running total,
/// threads that have ended included.
fn cpu_clock(pid: &str) -> Option<Duration> {
    let pid: libc::pid_t = if pid == "self" { 0 } else { pid.parse().ok()? };
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both calls only write the out-parameters passed, which live on this stack.
    let ok = unsafe {
        libc::clock_getcpuclockid(pid, &mut clock) == 0 && libc::clock_gettime(clock, &mut ts) == 0
    };
    ok.then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// The numeric fields of `/proc/<pid>/stat` after the command (which may hold spaces):
/// state is 0 (not a number, so 0 here), ppid 1, utime 11, stime 12, cutime 13, cstime 14.
fn stat_fields(pid: &str) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    Some(
        rest.split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect(),
    )
}

fn ticks(n: u64) -> Duration {
    Duration::from_millis(n * 1000 / clock_ticks())
}

/// Busy and total CPU time of the whole machine, from `/proc/stat`.
pub fn machine_cpu() -> Option<(Duration, Duration)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?;
    Some((ticks(total - idle), ticks(total)))
}

/// Linux's `USER_HZ`, which /proc's times count in (100 on every Linux ABI in use).
fn clock_ticks() -> u64 {
    100
}

/// CPU time (user + system) of the processes `roots` and all their descendants, from
/// `/proc`. A process that ended between two readings stays counted: its parent, on reaping
/// it, adds its time to its own children's time, which is counted here too (a server that
/// forks a process per connection, as PostgreSQL does, is measured whole). `None` where there
/// is no procfs.
pub fn tree_cpu(roots: &[u32]) -> Option<Duration> {
    let mut parent = std::collections::HashMap::new();
    let mut used = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // Gone since the listing: nothing to count.
        let Some(f) = stat_fields(&pid.to_string()) else {
            continue;
        };
        let num = |i: usize| f.get(i).copied().unwrap_or(0);
        parent.insert(pid, num(1) as u32);
        used.insert(pid, num(11) + num(12) + num(13) + num(14));
    }
    let inside = |mut pid: u32| loop {
        if roots.contains(&pid) {
            return true;
        }
        match parent.get(&pid) {
            Some(&p) if p != 0 && p != pid => pid = p,
            _ => return false,
        }
    };
    let total: u64 = used
        .iter()
        .filter(|(pid, _)| inside(**pid))
        .map(|(_, t)| t)
        .sum();
    Some(ticks(total))
}
