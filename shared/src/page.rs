//! Pagination of every listing: a `limit` and an opaque `continuationToken` that encodes the
//! store's cursor.

use crate::error::{ApiError, ApiResult};
use crate::store::Cursor;
use serde_json::json;

/// Page size limit of every list endpoint.
pub const MAX_PAGE: usize = 1000;

/// A page request: `limit` (capped at [`MAX_PAGE`]) and an opaque token.
#[derive(Debug, Clone, Default)]
pub struct PageReq {
    /// Maximum items.
    pub limit: usize,
    /// Where to continue.
    pub token: Option<String>,
}

impl PageReq {
    /// The store cursor the token stands for (`None` on the first page).
    pub fn cursor(&self) -> ApiResult<Option<Cursor>> {
        self.token.as_deref().map(decode_token).transpose()
    }
}

/// Encodes a store cursor as an opaque continuation token.
pub fn encode_token(c: &Cursor) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!([c.0, c.1, c.2]).to_string())
}

/// Decodes a continuation token; a bad one is `400 InvalidRequestArguments`.
pub fn decode_token(t: &str) -> ApiResult<Cursor> {
    use base64::Engine;
    let bad = || ApiError::bad_argument("continuationToken is not valid");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(t)
        .map_err(|_| bad())?;
    let v: Vec<String> = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    match <[String; 3]>::try_from(v) {
        Ok([a, b, c]) => Ok((a, b, c)),
        Err(_) => Err(bad()),
    }
}
