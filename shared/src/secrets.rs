//! Secrets for the Lambda functions: the queue's and the root client's access tokens, kept in
//! AWS Secrets Manager and read again as [`crate::tokens`] says.

use crate::time::Ts;
use crate::tokens::{TokenSource, TokenVersions};
use async_trait::async_trait;
use aws_sdk_secretsmanager::Client;
use std::sync::Mutex;

/// A token kept in a Secrets Manager secret: its `AWSCURRENT` version and when that version
/// was made (one call per read) and, asked separately, its `AWSPREVIOUS` version (read once per
/// current version).
pub struct SecretToken {
    client: Client,
    name: String,
    /// The current version's id, and the previous token once read for it.
    known: Mutex<Option<(String, Option<Option<String>>)>>,
}

impl SecretToken {
    /// The token in secret `name`.
    pub fn new(sdk: &aws_config::SdkConfig, name: impl Into<String>) -> Self {
        SecretToken {
            client: Client::new(sdk),
            name: name.into(),
            known: Mutex::new(None),
        }
    }

    async fn stage(
        &self,
        stage: &str,
    ) -> Result<
        Option<aws_sdk_secretsmanager::operation::get_secret_value::GetSecretValueOutput>,
        String,
    > {
        match self
            .client
            .get_secret_value()
            .secret_id(&self.name)
            .version_stage(stage)
            .send()
            .await
        {
            Ok(out) => Ok(Some(out)),
            Err(e)
                if stage != "AWSCURRENT"
                    && e.as_service_error()
                        .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                Ok(None)
            }
            Err(e) => Err(format!(
                "reading secret {} ({stage}): {}",
                self.name,
                aws_sdk_secretsmanager::error::DisplayErrorContext(&e)
            )),
        }
    }
}

#[async_trait]
impl TokenSource for SecretToken {
    async fn read(&self) -> Result<TokenVersions, String> {
        let out = self
            .stage("AWSCURRENT")
            .await?
            .ok_or_else(|| format!("secret {} has no current version", self.name))?;
        let text = out
            .secret_string()
            .ok_or_else(|| format!("secret {} has no string value", self.name))?;
        let version = out.version_id().unwrap_or_default().to_string();
        if let Ok(mut k) = self.known.lock() {
            if k.as_ref().is_none_or(|(v, _)| *v != version) {
                *k = Some((version, None));
            }
        }
        Ok(TokenVersions {
            current: token_in(text),
            since: out.created_date().and_then(|d| d.to_millis().ok()).map(Ts),
        })
    }

    async fn previous(&self) -> Result<Option<String>, String> {
        let known = self.known.lock().ok().and_then(|k| k.clone());
        if let Some((_, Some(previous))) = known {
            return Ok(previous);
        }
        let previous = self
            .stage("AWSPREVIOUS")
            .await?
            .and_then(|o| o.secret_string().map(token_in));
        if let Ok(mut k) = self.known.lock() {
            if let Some((v, _)) = known {
                // Unless a read has moved on to another version meanwhile.
                if k.as_ref().is_some_and(|(now, _)| *now == v) {
                    *k = Some((v, Some(previous.clone())));
                }
            }
        }
        Ok(previous)
    }
}

/// The access token in a secret's string: the string itself, or its `accessToken` field when
/// it holds JSON such as `{"clientId": .., "accessToken": ..}`.
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
