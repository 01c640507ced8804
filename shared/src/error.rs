//! The errors that go on the wire, with Taskcluster's codes and statuses.

use crate::store::StoreError;
use serde_json::{json, Value};
use std::fmt;
use std::sync::Arc;

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
    /// None of the methods the caller accepts is available (the object service's).
    NoMatchingMethod,
    /// The request did not arrive in time (the local server's body timeout).
    RequestTimeout,
    /// A bug or an infrastructure failure; details are logged, not returned.
    InternalServerError,
}

impl ErrorCode {
    /// Every code, in status order.
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::MalformedPayload,
        ErrorCode::InvalidRequestArguments,
        ErrorCode::InputValidationError,
        ErrorCode::InputError,
        ErrorCode::AuthenticationFailed,
        ErrorCode::InsufficientScopes,
        ErrorCode::ResourceNotFound,
        ErrorCode::NoMatchingMethod,
        ErrorCode::RequestTimeout,
        ErrorCode::RequestConflict,
        ErrorCode::ResourceExpired,
        ErrorCode::InputTooLarge,
        ErrorCode::InternalServerError,
    ];

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
            ErrorCode::NoMatchingMethod => 406,
            ErrorCode::RequestTimeout => 408,
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
            ErrorCode::NoMatchingMethod => "NoMatchingMethod",
            ErrorCode::RequestTimeout => "RequestTimeout",
            ErrorCode::InternalServerError => "InternalServerError",
        }
    }
}

/// An error as the client sees it: a code, a message, and optional structured details; an
/// internal error keeps its cause ([`std::error::Error::source`]), which is logged, never sent.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The Taskcluster error code.
    pub code: ErrorCode,
    /// A human-readable explanation, safe to show to the caller.
    pub message: String,
    /// Extra structured fields merged into the body (e.g. `required`, `unsatisfied`).
    pub details: Option<Value>,
    /// What caused an internal error.
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl ApiError {
    /// An error with the given code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: None,
            source: None,
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
    /// 500 `InternalServerError` for a bug described by `cause`. The client sees only an
    /// incident id; whoever handles the error logs the cause with it ([`ApiError::log`]).
    pub fn internal(cause: impl fmt::Display) -> Self {
        Self::caused_by(InternalCause(cause.to_string()))
    }

    /// The same error with extra structured fields for the body.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 500 `InternalServerError` that keeps `cause` as its source.
    pub fn caused_by(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        let incident = uuid::Uuid::new_v4().to_string();
        ApiError {
            code: ErrorCode::InternalServerError,
            message: format!("Internal Server Error, incidentId {incident}"),
            details: Some(json!({ "incidentId": incident })),
            source: Some(Arc::new(cause)),
        }
    }

    /// True if trying the same thing again may succeed: a store that throttled or failed
    /// transiently, or a record changing too fast (409 after exhausting retries). Bugs and
    /// client errors are permanent.
    pub fn is_retryable(&self) -> bool {
        match self.code {
            ErrorCode::RequestConflict => true,
            ErrorCode::InternalServerError => self
                .source
                .as_deref()
                .and_then(|s| s.downcast_ref::<StoreError>())
                .is_some_and(StoreError::is_transient),
            _ => false,
        }
    }

    /// The messages of its sources, outermost first, joined by `: ` (empty without one).
    pub fn cause_chain(&self) -> String {
        let mut chain = String::new();
        let mut next = self.source.as_deref().map(|s| s as &dyn std::error::Error);
        while let Some(e) = next {
            if !chain.is_empty() {
                chain.push_str(": ");
            }
            chain.push_str(&e.to_string());
            next = e.source();
        }
        chain
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

impl std::error::Error for ApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// The cause of an internal error known only by its description.
#[derive(Debug)]
struct InternalCause(String);

impl fmt::Display for InternalCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InternalCause {}

impl From<StoreError> for ApiError {
    /// A store failure is internal, except an item over the size limit, which only a client's
    /// input (a huge definition) can cause: `413 InputTooLarge`.
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::ItemTooLarge(n) => ApiError::new(
                ErrorCode::InputTooLarge,
                format!("The item is too large to store ({n} bytes; items are limited to 400 KB)"),
            ),
            StoreError::BadCursor => ApiError::bad_argument("continuationToken is not valid"),
            other => ApiError::caused_by(other),
        }
    }
}

impl From<serde_json::Error> for ApiError {
    /// A stored item that does not decode is a bug (or a corrupted item): internal.
    fn from(e: serde_json::Error) -> Self {
        ApiError::caused_by(e)
    }
}

/// Shorthand for operation results.
pub type ApiResult<T> = Result<T, ApiError>;
