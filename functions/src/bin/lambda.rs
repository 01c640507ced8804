//! Every Lambda function of the stack in one binary (see `functions::lambda`): the
//! function's `Handler` (`_HANDLER`) selects what it serves.

/// mimalloc rather than glibc's malloc, which took about a fifth of the server's CPU in the
/// workload bench (many short-lived JSON values per request).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let cfg = functions::LambdaConfig::from_env()?;
    functions::lambda::run(cfg).await
}
