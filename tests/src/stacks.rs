//! Deployed-shape stacks shared by the tests of one run (`TCQ_TEST_BACKEND=shape`).
//!
//! A stack costs its tables, streams, queues and secrets on LocalStack, a cold start of each
//! function it uses and a second of every schedule; most tests need nothing of it but a
//! configuration. So the tests of one run that configure the shape alike share one stack, kept
//! by that configuration: each test isolates itself by its own task queues, task ids and
//! graph ids, as tests sharing a deployment would. A stack goes a few seconds after its last
//! test ended (the next test of a module usually asks for it again before), and whatever is
//! left goes when the run exits. Tests that need a stack to themselves (counting a function's
//! invocations, reading a whole index) ask for one with [`Sharing::Alone`].
//!
//! Stacks run on a runtime of their own, since each test's runtime ends with the test.

use crate::shape::{Shape, ShapeConfig};
use shared::events::RecordingSink;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// How long a stack outlives its last test, for the next test of the same configuration.
const GRACE: Duration = Duration::from_secs(5);

/// Whether a test may share its stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// With every test of the same configuration.
    Shared,
    /// With no other test.
    Alone,
}

/// A running stack and the recording of its events.
pub struct Stack {
    /// The deployed shape.
    pub shape: Shape,
    /// Every event its exchanges carried, in order (every test's on a shared stack).
    pub events: RecordingSink,
    recorder: tokio::task::JoinHandle<()>,
}

impl Stack {
    async fn stop(&self) {
        self.recorder.abort();
        self.shape.stop().await;
    }
}

struct Entry {
    stack: Arc<tokio::sync::OnceCell<Arc<Stack>>>,
    users: usize,
    /// Bumped on every lease, so that a grace period that began earlier leaves the stack be.
    leases: u64,
}

fn entries() -> std::sync::MutexGuard<'static, BTreeMap<String, Entry>> {
    static STACKS: OnceLock<Mutex<BTreeMap<String, Entry>>> = OnceLock::new();
    STACKS
        .get_or_init(|| {
            // SAFETY: registering a plain `extern "C"` function with the C library.
            unsafe { libc::atexit(stop_all_at_exit) };
            // The harness's own warnings (a function timed out and was killed, an integration
            // failed, a stream batch was given up on) go to the run's output: they say why a
            // test saw a gateway's 500 or 503.
            let _ = tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_env_filter(tracing_subscriber::EnvFilter::new("blackbox=warn"))
                .try_init();
            Mutex::default()
        })
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The runtime every stack runs on (its gateway, pollers, schedules and recorder).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("shape")
            .enable_all()
            .build()
            .expect("the stacks' runtime")
    })
}

/// Stops what is left when the run exits (the last tests' stacks, in their grace period).
extern "C" fn stop_all_at_exit() {
    let left: Vec<Arc<Stack>> = std::mem::take(&mut *entries())
        .into_values()
        .filter_map(|e| e.stack.get().cloned())
        .collect();
    if left.is_empty() {
        return;
    }
    runtime().block_on(async {
        for s in left {
            s.stop().await;
        }
    });
}

/// A test's use of a stack: the stack goes when its last lease is dropped (after a grace
/// period if it is shared).
pub struct Lease {
    /// The stack.
    pub stack: Arc<Stack>,
    _user: User,
}

/// One user of the stack under `key`, counted from before the stack starts (so that a start
/// that fails is given back too) until the lease is dropped.
struct User {
    key: String,
}

impl Drop for User {
    fn drop(&mut self) {
        let (leases, grace) = {
            let mut all = entries();
            let Some(e) = all.get_mut(&self.key) else {
                return;
            };
            e.users -= 1;
            if e.users > 0 {
                return;
            }
            let grace = if self.key.starts_with(ALONE) {
                Duration::ZERO
            } else {
                GRACE
            };
            (e.leases, grace)
        };
        let key = self.key.clone();
        runtime().spawn(async move {
            tokio::time::sleep(grace).await;
            let gone = {
                let mut all = entries();
                match all.get(&key) {
                    Some(e) if e.users == 0 && e.leases == leases => all.remove(&key),
                    _ => None,
                }
            };
            if let Some(s) = gone.and_then(|e| e.stack.get().cloned()) {
                s.stop().await;
            }
        });
    }
}

const ALONE: &str = "alone:";

/// A lease on the stack configured as `sc` (all but its name), started by `start` if no test
/// holds one (`sc.stack` names it then).
pub async fn lease<F, Fut>(sc: &ShapeConfig, sharing: Sharing, start: F) -> Lease
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Stack> + Send + 'static,
{
    let key = match sharing {
        Sharing::Alone => format!("{ALONE}{}", sc.stack),
        Sharing::Shared => key_of(sc),
    };
    let cell = {
        let mut all = entries();
        let e = all.entry(key.clone()).or_insert_with(|| Entry {
            stack: Arc::default(),
            users: 0,
            leases: 0,
        });
        e.users += 1;
        e.leases += 1;
        e.stack.clone()
    };
    let user = User { key };
    let stack = cell
        .get_or_init(|| async {
            let started = runtime().spawn(start()).await;
            Arc::new(started.unwrap_or_else(|e| panic!("the deployed shape starts: {e}")))
        })
        .await
        .clone();
    Lease { stack, _user: user }
}

/// What makes two configurations one stack: everything but the stack's own name (which the
/// exchange prefixes and parameters may carry).
fn key_of(sc: &ShapeConfig) -> String {
    let mut c = sc.clone();
    let name = std::mem::take(&mut c.stack);
    let unnamed = |s: &String| s.replace(&name, "<stack>");
    c.parameters = c
        .parameters
        .iter()
        .map(|(k, v)| (k.clone(), unnamed(v)))
        .collect();
    format!("{c:?}")
}

/// Starts a stack's recorder and shape on the stacks' runtime (see [`lease`]).
pub async fn start_stack(sc: ShapeConfig, prefixes: Vec<(String, String)>) -> Stack {
    let events = RecordingSink::default();
    let (ready, bound) = tokio::sync::oneshot::channel();
    // The recorder reads the machine's broker itself, not the URL the functions are given
    // (a test may give them a relay it takes down).
    let recorder = tokio::spawn(crate::amqp::record(
        crate::amqp::amqp_url(&crate::amqp::broker_addr()),
        prefixes,
        events.clone(),
        ready,
    ));
    // Bound before anything is published.
    bound.await.expect("the event recorder binds its queue");
    let shape = Shape::start(sc).await.expect("the deployed shape starts");
    Stack {
        shape,
        events,
        recorder,
    }
}
