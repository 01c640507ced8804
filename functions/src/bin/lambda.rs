//! Every Lambda function of the stack in one binary (see `functions::lambda`): the
//! function's `Handler` (`_HANDLER`) selects what it serves.

/// mimalloc rather than glibc's malloc, which took about a fifth of the server's CPU in the
/// workload bench (many short-lived JSON values per request).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One thread: an instance serves one invocation at a time, and a multi-threaded runtime only
/// added hand-offs between its threads (about a tenth of a warm invocation's CPU, measured by
/// `cargo bench -p blackbox --bench function_cpu`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let cfg = functions::LambdaConfig::from_env()?;
    functions::lambda::run(cfg).await
}
