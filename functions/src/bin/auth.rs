//! Lambda function `auth`: every route under /api/auth/v1/ (clients, roles, scopes,
//! authenticateHawk, testAuthenticate*).
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_auth().await
}
