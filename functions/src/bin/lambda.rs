//! Every Lambda function of the stack in one binary (see `functions::multicall`): the
//! function's `Handler` (`_HANDLER`) selects what it serves.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let handler = functions::multicall::from_env()?;
    functions::multicall::run(handler).await
}
