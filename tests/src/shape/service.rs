//! The template's ECS services (the claim service of `ClaimMode=service`), run as ECS runs
//! them: each task the `tc-queue` binary with its container's variables, the secrets'
//! values in place of their references, and its own address; the gateway proxies to them
//! (see [`super::gateway`]). What is not emulated: the image itself (the binary the image
//! script packs runs here directly), health checks and the replacement of a stopped task
//! (a test stops and starts tasks itself), scaling, and Cloud Map's DNS.

use super::template::{Error, Service};
use functions::env;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// One running task.
struct Task {
    addr: SocketAddr,
    child: Child,
    /// Its data directory (unused on DynamoDB, but the server makes it).
    _dir: tempfile::TempDir,
}

/// One ECS service's tasks.
pub struct Tasks {
    /// The service as the template declares it.
    pub def: Service,
    env: BTreeMap<String, String>,
    binary: PathBuf,
    log_dir: Option<PathBuf>,
    running: Mutex<Vec<Task>>,
    started: AtomicUsize,
    next: AtomicUsize,
}

/// The value of an ECS secret reference: the secret's ARN, then optionally `:<JSON key>:`
/// (and a version stage and id, not emulated).
async fn secret(value_from: &str) -> Result<String, Error> {
    let parts: Vec<&str> = value_from.split(':').collect();
    let (arn, key) = if parts.len() > 7 {
        (parts[..7].join(":"), parts[7].to_string())
    } else {
        (value_from.to_string(), String::new())
    };
    let text = super::resources::secret_value(&arn).await?;
    if key.is_empty() {
        return Ok(text);
    }
    let v: serde_json::Value = serde_json::from_str(&text)?;
    v[&key]
        .as_str()
        .map(String::from)
        .ok_or_else(|| format!("secret {arn} has no key {key}").into())
}

impl Tasks {
    /// The service's tasks, none started: `extra` replaces the container's variables that
    /// point at AWS (LocalStack's endpoint and credentials, the local broker).
    pub async fn new(
        def: Service,
        binary: PathBuf,
        extra: &BTreeMap<String, String>,
        log_dir: Option<PathBuf>,
    ) -> Result<Tasks, Error> {
        let mut env = def.env.clone();
        for (name, from) in &def.secrets {
            env.insert(name.clone(), secret(from).await?);
        }
        env.extend(extra.clone());
        // Each task listens on a port of its own here, where ECS gives each its own address.
        env.insert(env::BIND.into(), "127.0.0.1".into());
        env.insert(env::PORT.into(), "0".into());
        Ok(Tasks {
            def,
            env,
            binary,
            log_dir,
            running: Mutex::new(vec![]),
            started: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
        })
    }

    /// Starts one task and waits until it listens.
    pub async fn start(&self) -> Result<SocketAddr, Error> {
        let n = self.started.fetch_add(1, Ordering::SeqCst);
        let dir = tempfile::tempdir()?;
        let mut cmd = Command::new(&self.binary);
        cmd.env_clear()
            .envs(&self.env)
            .env(env::DATA_DIR, dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        super::lambda::die_with_starting_thread(cmd.as_std_mut());
        match &self.log_dir {
            Some(d) => {
                let log = std::fs::File::create(d.join(format!("{}-{n}.log", self.def.id)))?;
                cmd.stderr(log);
            }
            None => {
                cmd.stderr(Stdio::null());
            }
        }
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        // The server prints its root URL once it listens.
        let found = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.strip_prefix("export TASKCLUSTER_ROOT_URL=http://") {
                    return Ok::<_, std::io::Error>(url.parse::<SocketAddr>().ok());
                }
            }
            Ok(None)
        })
        .await;
        let addr = match found {
            Ok(Ok(Some(addr))) => addr,
            _ => {
                let _ = child.start_kill();
                return Err(format!("{} task {n} did not start", self.def.id).into());
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        super::lock(&self.running).push(Task {
            addr,
            child,
            _dir: dir,
        });
        Ok(addr)
    }

    /// Starts the service's desired count of tasks.
    pub async fn start_desired(&self) -> Result<(), Error> {
        for _ in 0..self.def.tasks {
            self.start().await?;
        }
        Ok(())
    }

    /// The address of a running task, round robin (Cloud Map answers every healthy one and
    /// the gateway spreads requests among them); `None`: no task runs.
    pub fn pick(&self) -> Option<SocketAddr> {
        let running = super::lock(&self.running);
        if running.is_empty() {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % running.len();
        Some(running[i].addr)
    }

    /// Running tasks.
    pub fn count(&self) -> usize {
        super::lock(&self.running).len()
    }

    fn pids(&self) -> Vec<u32> {
        super::lock(&self.running)
            .iter()
            .filter_map(|t| t.child.id())
            .collect()
    }

    /// CPU seconds the running tasks have used (from /proc).
    pub fn cpu_secs(&self) -> f64 {
        super::lambda::cpu_secs(self.pids())
    }

    /// Peak resident memory of each running task, in KiB (from /proc).
    pub fn rss_kib(&self) -> Vec<u64> {
        self.pids()
            .into_iter()
            .filter_map(super::lambda::rss_kib)
            .collect()
    }

    /// Kills a task at once (SIGKILL), as a host failure or an out-of-memory kill does; the
    /// oldest first. False when none runs.
    pub fn kill_one(&self) -> bool {
        let mut running = super::lock(&self.running);
        if running.is_empty() {
            return false;
        }
        let mut task = running.remove(0);
        let _ = task.child.start_kill();
        true
    }

    /// Stops every task (the service scaled to zero).
    pub fn stop_all(&self) {
        for mut t in std::mem::take(&mut *super::lock(&self.running)) {
            let _ = t.child.start_kill();
        }
    }
}
