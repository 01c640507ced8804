//! The authentication seam. Hawk, clients and roles plug in here (a later capability); for
//! now every caller holds `*`, while every endpoint already checks its exact scope expression.

use super::ApiRequest;
use crate::error::{ApiError, ErrorCode};
use crate::scopes::ScopeExpr;
use async_trait::async_trait;
use serde_json::json;

/// An authenticated caller and its (expanded) scopes.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The clientId, if the request was signed.
    pub client_id: Option<String>,
    /// Every scope the caller holds.
    pub scopes: Vec<String>,
}

impl Caller {
    /// `403 InsufficientScopes` unless the caller satisfies `expr`.
    pub fn authorize(&self, expr: &ScopeExpr) -> Result<(), ApiError> {
        match expr.unsatisfied(&self.scopes) {
            None => Ok(()),
            Some(missing) => Err(ApiError {
                code: ErrorCode::InsufficientScopes,
                message: format!(
                    "Client {} lacks scopes.\nRequired: {}\nUnsatisfied: {}",
                    self.client_id.as_deref().unwrap_or("(anonymous)"),
                    expr.to_json(),
                    missing.to_json()
                ),
                details: Some(
                    json!({ "required": expr.to_json(), "unsatisfied": missing.to_json() }),
                ),
            }),
        }
    }
}

/// Turns a request into a caller, or rejects it with `401 AuthenticationFailed`.
#[async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// Authenticates one request.
    async fn authenticate(&self, req: &ApiRequest) -> Result<Caller, ApiError>;
}

/// Grants every request the scopes it was built with (the local default is `*`).
pub struct OpenAccess {
    /// Scopes every caller gets.
    pub scopes: Vec<String>,
}

impl Default for OpenAccess {
    fn default() -> Self {
        OpenAccess {
            scopes: vec!["*".into()],
        }
    }
}

#[async_trait]
impl Authenticator for OpenAccess {
    async fn authenticate(&self, _req: &ApiRequest) -> Result<Caller, ApiError> {
        Ok(Caller {
            client_id: None,
            scopes: self.scopes.clone(),
        })
    }
}
