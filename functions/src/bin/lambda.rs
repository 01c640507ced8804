//! Every Lambda function of the stack in one binary (see `functions::lambda`): the
//! function's `Handler` (`_HANDLER`) selects what it serves.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let cfg = functions::LambdaConfig::from_env()?;
    functions::lambda::run(cfg).await
}
