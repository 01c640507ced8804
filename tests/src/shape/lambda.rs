//! The Lambda service, locally: each function of the template runs as the deployable
//! `lambda` binary with the handler and environment the template gives it, one process per
//! instance, each instance behind a Runtime API of its own and serving one invocation at a
//! time. Instances are started on demand (a cold start) up to the function's concurrency and
//! kept warm; an invocation past the function's timeout kills its instance, as Lambda does.

use super::template::Function;
use crate::runtime_api::{Invoked, RuntimeApi};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lambda's limit on a synchronous invocation's payload (the event), in bytes.
pub const MAX_REQUEST_BYTES: usize = 6 * 1024 * 1024;
/// Lambda's limit on a synchronous invocation's response, in bytes.
pub const MAX_RESPONSE_BYTES: usize = 6 * 1024 * 1024 + 100;

/// Why an invocation failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The function and the account are at their concurrency (Lambda's 429).
    Throttled,
    /// The event is over [`MAX_REQUEST_BYTES`] (Lambda's 413; it never reached the function).
    RequestTooLarge(usize),
    /// The answer is over [`MAX_RESPONSE_BYTES`].
    ResponseTooLarge(usize),
    /// No answer within the function's timeout: the instance was killed.
    TimedOut,
    /// The function (or its init) reported an error.
    Error(Value),
}

impl Failure {
    /// The failure as Lambda reports it to an asynchronous caller's destination.
    pub fn to_json(&self) -> Value {
        match self {
            Failure::Throttled => json!({ "errorType": "TooManyRequestsException" }),
            Failure::RequestTooLarge(n) => {
                json!({ "errorType": "RequestEntityTooLargeException", "size": n })
            }
            Failure::ResponseTooLarge(n) => {
                json!({ "errorType": "Function.ResponseSizeTooLarge", "size": n })
            }
            Failure::TimedOut => {
                json!({ "errorType": "Sandbox.Timedout", "errorMessage": "Task timed out" })
            }
            Failure::Error(v) => v.clone(),
        }
    }
}

/// A running instance: the process and its Runtime API.
struct Instance {
    api: RuntimeApi,
    child: Child,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The account's concurrency, shared by every function without a reservation of its own.
#[derive(Debug)]
pub struct Account {
    limit: usize,
    running: AtomicUsize,
    /// Counts finished invocations: what a function wrote is on the tables' streams by then.
    ended: tokio::sync::watch::Sender<u64>,
}

impl Account {
    /// An account that runs at most `limit` instances at once.
    pub fn new(limit: usize) -> Arc<Account> {
        Arc::new(Account {
            limit,
            running: AtomicUsize::new(0),
            ended: tokio::sync::watch::Sender::new(0),
        })
    }
}

/// One function: its idle instances, and how many are busy.
pub struct Pool {
    /// The function as the template declares it.
    pub def: Function,
    env: BTreeMap<String, String>,
    bin: PathBuf,
    /// Where its instances' output goes (`<dir>/<function id>.log`, as CloudWatch keeps a
    /// function's log group); none: discarded.
    log_dir: Option<PathBuf>,
    idle: Mutex<Vec<Instance>>,
    busy: AtomicUsize,
    /// Process ids of the instances handling an invocation now.
    busy_pids: Mutex<Vec<u32>>,
    account: Arc<Account>,
    /// Instances started so far (cold starts).
    pub cold_starts: AtomicUsize,
    /// Invocations so far.
    pub invocations: AtomicUsize,
    /// How long its invocations took, in microseconds, from the event's hand-over to the
    /// answer (what Lambda bills as duration).
    pub busy_micros: AtomicU64,
}

/// Gives a concurrency slot back however an invocation ends.
struct Slot<'a> {
    pool: &'a Pool,
    account: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.pool.busy.fetch_sub(1, Ordering::SeqCst);
        if self.account {
            self.pool.account.running.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Pool {
    /// A pool for `def`, whose instances run `bin` with `def`'s environment and `extra`.
    pub fn new(
        def: Function,
        bin: PathBuf,
        extra: &BTreeMap<String, String>,
        account: Arc<Account>,
        log_dir: Option<PathBuf>,
    ) -> Pool {
        let mut env = def.env.clone();
        env.extend(extra.clone());
        Pool {
            def,
            env,
            bin,
            log_dir,
            idle: Mutex::new(vec![]),
            busy: AtomicUsize::new(0),
            busy_pids: Mutex::new(vec![]),
            account,
            cold_starts: AtomicUsize::new(0),
            invocations: AtomicUsize::new(0),
            busy_micros: AtomicU64::new(0),
        }
    }

    /// Takes a concurrency slot: the function's reservation, else the account's.
    fn slot(&self) -> Option<Slot<'_>> {
        let busy = self.busy.fetch_add(1, Ordering::SeqCst);
        match self.def.reserved {
            Some(r) if busy >= r => {
                self.busy.fetch_sub(1, Ordering::SeqCst);
                None
            }
            Some(_) => Some(Slot {
                pool: self,
                account: false,
            }),
            None => {
                let running = self.account.running.fetch_add(1, Ordering::SeqCst);
                if running >= self.account.limit {
                    self.account.running.fetch_sub(1, Ordering::SeqCst);
                    self.busy.fetch_sub(1, Ordering::SeqCst);
                    return None;
                }
                Some(Slot {
                    pool: self,
                    account: true,
                })
            }
        }
    }

    async fn start_instance(&self) -> Instance {
        let api = RuntimeApi::start_with(self.def.timeout).await;
        let mut cmd = Command::new(&self.bin);
        cmd.envs(&self.env)
            .env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
            .env("_HANDLER", &self.def.handler)
            .env("AWS_LAMBDA_FUNCTION_NAME", &self.def.id)
            .env(
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
                self.def.memory_mb.to_string(),
            )
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "local")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "local");
        let log = self.log_dir.as_ref().and_then(|d| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(d.join(format!("{}.log", self.def.id)))
                .ok()
        });
        match log {
            Some(f) => {
                let err = f
                    .try_clone()
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null());
                cmd.stdout(Stdio::from(f)).stderr(err);
            }
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        die_with_starting_thread(&mut cmd);
        let child = cmd.spawn().expect("spawn a function instance");
        self.cold_starts.fetch_add(1, Ordering::SeqCst);
        Instance { api, child }
    }

    /// Invokes the function synchronously with `event`.
    pub async fn invoke(&self, event: &Value) -> Result<Value, Failure> {
        let payload = event.to_string();
        if payload.len() > MAX_REQUEST_BYTES {
            return Err(Failure::RequestTooLarge(payload.len()));
        }
        let Some(_slot) = self.slot() else {
            return Err(Failure::Throttled);
        };
        self.invocations.fetch_add(1, Ordering::SeqCst);
        // An idle instance that died (killed) is replaced, as Lambda replaces it.
        let warm = loop {
            let Some(mut i) = self.idle.lock().ok().and_then(|mut i| i.pop()) else {
                break None;
            };
            if matches!(i.child.try_wait(), Ok(None)) {
                break Some(i);
            }
        };
        let mut instance = match warm {
            Some(i) => i,
            None => self.start_instance().await,
        };
        let pid = instance.child.id();
        if let Ok(mut b) = self.busy_pids.lock() {
            b.push(pid);
        }
        // The function's timeout runs from the invocation; a cold start's init counts too.
        let started = Instant::now();
        // An instance that dies meanwhile fails the invocation at once, as on Lambda
        // (`Runtime.ExitError`), rather than at the timeout.
        let outcome = {
            let invocation = instance.api.invoke_for(event.clone(), self.def.timeout);
            tokio::pin!(invocation);
            loop {
                tokio::select! {
                    o = &mut invocation => break Some(o),
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {
                        if !matches!(instance.child.try_wait(), Ok(None)) {
                            break None;
                        }
                    }
                }
            }
        };
        if let Ok(mut b) = self.busy_pids.lock() {
            b.retain(|p| *p != pid);
        }
        self.busy_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::SeqCst);
        self.account.ended.send_modify(|n| *n += 1);
        let Some(outcome) = outcome else {
            tracing::warn!(function = %self.def.id, pid, "instance died during an invocation");
            return Err(Failure::Error(json!({
                "errorType": "Runtime.ExitError",
                "errorMessage": "RequestId: local Error: Runtime exited with error: signal: killed"
            })));
        };
        let result = match outcome {
            Invoked::TimedOut => {
                tracing::warn!(function = %self.def.id, after = ?started.elapsed(), "timed out; instance killed");
                return Err(Failure::TimedOut);
            }
            Invoked::Err(e) if e.as_str().is_some() || e.get("errorType").is_none() => {
                // An init error: the instance is gone.
                return Err(Failure::Error(e));
            }
            Invoked::Err(e) => Err(Failure::Error(e)),
            Invoked::Ok(v) => {
                let size = v.to_string().len();
                if size > MAX_RESPONSE_BYTES {
                    Err(Failure::ResponseTooLarge(size))
                } else {
                    Ok(v)
                }
            }
        };
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(instance);
        }
        result
    }

    /// Changes whenever an invocation of any function of the account ends (see
    /// [`super::streams`]).
    pub fn invocations_ended(&self) -> tokio::sync::watch::Receiver<u64> {
        self.account.ended.subscribe()
    }

    /// Instances running now (idle or busy).
    pub fn instances(&self) -> usize {
        self.idle.lock().map(|i| i.len()).unwrap_or(0) + self.busy.load(Ordering::SeqCst)
    }

    /// Process ids of this function's instances, idle and busy.
    pub fn pids(&self) -> Vec<u32> {
        let mut out = self.idle_pids();
        if let Ok(b) = self.busy_pids.lock() {
            out.extend(b.iter().copied());
        }
        out
    }

    /// Process ids of this function's idle instances.
    pub fn idle_pids(&self) -> Vec<u32> {
        self.idle
            .lock()
            .map(|idle| idle.iter().map(|i| i.child.id()).collect())
            .unwrap_or_default()
    }

    /// CPU time (user and system) of this function's idle instances, in seconds (from
    /// /proc). Read while nothing is invoked, it is all the function's CPU so far but that of
    /// instances killed on a timeout.
    pub fn idle_cpu_secs(&self) -> f64 {
        cpu_secs(self.idle_pids())
    }

    /// Peak resident memory of this function's idle instances, in KiB (from /proc).
    pub fn idle_rss_kib(&self) -> Vec<u64> {
        self.idle_pids().into_iter().filter_map(rss_kib).collect()
    }
}

/// A process the shape starts (a function instance, a service's task) dies with the thread
/// that started it (a runtime's worker, which lives as long as its runtime), so that none
/// outlives a test run that ends without dropping it.
pub(crate) fn die_with_starting_thread(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches only the child being started.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// CPU time (user and system) of the processes `pids`, in seconds (from /proc).
pub fn cpu_secs(pids: impl IntoIterator<Item = u32>) -> f64 {
    pids.into_iter()
        .filter_map(|pid| crate::release::cpu_time(&pid.to_string()))
        .map(|t| t.as_secs_f64())
        .sum()
}

/// `VmHWM` of a process, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Every function of the template, by logical id.
pub struct Functions {
    pools: BTreeMap<String, Arc<Pool>>,
}

impl Functions {
    /// Pools for `defs`.
    pub fn new(
        defs: Vec<Function>,
        bin: PathBuf,
        extra: &BTreeMap<String, String>,
        account: Arc<Account>,
        log_dir: Option<PathBuf>,
    ) -> Functions {
        let pools = defs
            .into_iter()
            .map(|d| {
                let pool = Pool::new(d, bin.clone(), extra, account.clone(), log_dir.clone());
                (pool.def.id.clone(), Arc::new(pool))
            })
            .collect();
        Functions { pools }
    }

    /// The function with logical id `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Pool>> {
        self.pools.get(id).cloned()
    }

    /// Every function.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Pool>> {
        self.pools.values()
    }

    /// SIGKILLs one instance of the functions `which` selects, the `pick`-th (modulo their
    /// number) of them all in a stable order, as a host failure or an out-of-memory kill ends
    /// one; which function and process, if any ran.
    pub fn kill_one(&self, pick: u64, which: impl Fn(&Function) -> bool) -> Option<(String, u32)> {
        let mut all: Vec<(String, u32)> = self
            .pools
            .iter()
            .filter(|(_, p)| which(&p.def))
            .flat_map(|(id, p)| p.pids().into_iter().map(move |pid| (id.clone(), pid)))
            .collect();
        all.sort();
        if all.is_empty() {
            return None;
        }
        let (id, pid) = all.swap_remove((pick % all.len() as u64) as usize);
        let pid_t = libc::pid_t::try_from(pid).ok()?;
        // SAFETY: kill(2) with a pid this process started and has not reaped.
        unsafe {
            libc::kill(pid_t, libc::SIGKILL);
        }
        Some((id, pid))
    }

    /// Stops every instance.
    pub fn stop(&self) {
        for p in self.pools.values() {
            if let Ok(mut idle) = p.idle.lock() {
                idle.clear();
            }
        }
    }
}

/// Invokes asynchronously, as Lambda does for EventBridge: throttles are retried with
/// backoff; a failure is retried `def.async_retries` times (1 min, then 2 min apart, shortened
/// by `speedup`), then recorded in the function's on-failure destination.
pub async fn invoke_async(pool: Arc<Pool>, event: Value, speedup: f64) {
    let mut attempts = 0;
    let mut throttled = 0u32;
    loop {
        match pool.invoke(&event).await {
            Ok(_) => return,
            Err(Failure::Throttled) => {
                throttled += 1;
                let wait = Duration::from_millis((100u64 << throttled.min(8)).min(60_000));
                tokio::time::sleep(wait).await;
            }
            Err(f) if attempts < pool.def.async_retries => {
                attempts += 1;
                tracing::warn!(function = %pool.def.id, failure = ?f, "async invocation failed; retrying");
                let wait = Duration::from_secs(60 * attempts as u64).div_f64(speedup.max(1.0));
                tokio::time::sleep(wait).await;
            }
            Err(f) => {
                tracing::warn!(function = %pool.def.id, failure = ?f, "async invocation failed");
                if let Some(q) = &pool.def.async_on_failure {
                    let record = json!({
                        "version": "1.0",
                        "timestamp": shared::time::Ts::now(),
                        "requestContext": {
                            "functionArn": format!("arn:aws:lambda:{}:{}:function:{}", super::template::REGION, super::template::ACCOUNT, pool.def.id),
                            "condition": "RetriesExhausted",
                            "approximateInvokeCount": attempts + 1
                        },
                        "requestPayload": event,
                        "responseContext": { "functionError": "Unhandled" },
                        "responsePayload": f.to_json(),
                    });
                    super::resources::send_failure(q, &record).await;
                }
                return;
            }
        }
    }
}
