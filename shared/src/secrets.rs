//! Secrets for the Lambda functions: the queue's and the root client's access tokens, read
//! from AWS Secrets Manager once per cold start.

use aws_sdk_secretsmanager::Client;

/// The access token in secret `name`: the secret string itself, or its `accessToken` field
/// when it holds JSON such as `{"clientId": .., "accessToken": ..}`.
pub async fn access_token(sdk: &aws_config::SdkConfig, name: &str) -> Result<String, String> {
    let out = Client::new(sdk)
        .get_secret_value()
        .secret_id(name)
        .send()
        .await
        .map_err(|e| {
            format!(
                "reading secret {name}: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(&e)
            )
        })?;
    let text = out
        .secret_string()
        .ok_or_else(|| format!("secret {name} has no string value"))?;
    Ok(token_in(text))
}

fn token_in(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v["accessToken"].as_str().map(String::from))
        .unwrap_or_else(|| text.trim().to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_secret_is_a_bare_token_or_json_with_an_access_token() {
        assert_eq!(super::token_in(" abc \n"), "abc");
        assert_eq!(
            super::token_in(r#"{"clientId":"static/taskcluster/root","accessToken":"xyz"}"#),
            "xyz"
        );
    }
}
