//! The errors that go on the wire, with Taskcluster's codes and statuses.

use serde_json::{json, Value};
use std::fmt;

/// Taskcluster's error codes. Each maps to exactly one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Body is not JSON, or not an object, or has the wrong content type.
    MalformedPayload,
    /// A URL parameter or query argument does not match its pattern.
    InvalidRequestArguments,
    /// The body fails its JSON Schema.
    InputValidationError,
    /// A hand-checked rule on the input failed.
    InputError,
    /// Bad or missing credentials.
    AuthenticationFailed,
    /// The caller lacks scopes.
    InsufficientScopes,
    /// Unknown task, run or other resource.
    ResourceNotFound,
    /// The request conflicts with the current state.
    RequestConflict,
    /// The resource existed but has expired.
    ResourceExpired,
    /// The body or a stored item is too large.
    InputTooLarge,
    /// A bug or an infrastructure failure; details are logged, not returned.
    InternalServerError,
}

impl ErrorCode {
    /// The HTTP status for this code.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::MalformedPayload
            | ErrorCode::InvalidRequestArguments
            | ErrorCode::InputValidationError
            | ErrorCode::InputError => 400,
            ErrorCode::AuthenticationFailed => 401,
            ErrorCode::InsufficientScopes => 403,
            ErrorCode::ResourceNotFound => 404,
            ErrorCode::RequestConflict => 409,
            ErrorCode::ResourceExpired => 410,
            ErrorCode::InputTooLarge => 413,
            ErrorCode::InternalServerError => 500,
        }
    }

    /// The code as it appears in the error body.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::MalformedPayload => "MalformedPayload",
            ErrorCode::InvalidRequestArguments => "InvalidRequestArguments",
            ErrorCode::InputValidationError => "InputValidationError",
            ErrorCode::InputError => "InputError",
            ErrorCode::AuthenticationFailed => "AuthenticationFailed",
            ErrorCode::InsufficientScopes => "InsufficientScopes",
            ErrorCode::ResourceNotFound => "ResourceNotFound",
            ErrorCode::RequestConflict => "RequestConflict",
            ErrorCode::ResourceExpired => "ResourceExpired",
            ErrorCode::InputTooLarge => "InputTooLarge",
            ErrorCode::InternalServerError => "InternalServerError",
        }
    }
}

/// An error as the client sees it: a code, a message, and optional structured details.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The Taskcluster error code.
    pub code: ErrorCode,
    /// A human-readable explanation, safe to show to the caller.
    pub message: String,
    /// Extra structured fields merged into the body (e.g. `required`, `unsatisfied`).
    pub details: Option<Value>,
}

impl ApiError {
    /// An error with the given code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: None,
        }
    }
    /// 400 `InputError`.
    pub fn input(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InputError, message)
    }
    /// 400 `InvalidRequestArguments`.
    pub fn bad_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequestArguments, message)
    }
    /// 404 `ResourceNotFound`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ResourceNotFound, message)
    }
    /// 409 `RequestConflict`.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::RequestConflict, message)
    }
    /// 500 `InternalServerError`. The cause is logged with an incident id; the client only
    /// sees the id.
    pub fn internal(cause: impl fmt::Display) -> Self {
        let incident = uuid::Uuid::new_v4().to_string();
        tracing::error!(incident_id = %incident, error = %cause, "internal error");
        ApiError {
            code: ErrorCode::InternalServerError,
            message: format!("Internal Server Error, incidentId {incident}"),
            details: Some(json!({ "incidentId": incident })),
        }
    }
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.code.status()
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for ApiError {}

/// Shorthand for operation results.
pub type ApiResult<T> = Result<T, ApiError>;
