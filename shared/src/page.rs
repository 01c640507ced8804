//! Pagination of every listing: a `limit` and an opaque `continuationToken` that encodes the
//! store's cursor.

use crate::error::{ApiError, ApiResult};
use crate::store::Cursor;
use serde_json::json;

/// Page size limit of every list endpoint.
pub const MAX_PAGE: usize = 1000;

/// Bytes of items a page holds at most: a page stops before it, with a continuation token,
/// so that every reply stays inside Lambda's 6 MB response limit (with 6 KB definitions a
/// full page of 1000 would be about 6.6 MB). The same everywhere, so that clients see the
/// same pages from the local server as from the deployed functions.
pub const MAX_PAGE_BYTES: usize = 5_000_000;

/// Collects a page's items up to [`MAX_PAGE_BYTES`].
#[derive(Debug, Default)]
pub struct Filler {
    items: Vec<serde_json::Value>,
    bytes: usize,
}

impl Filler {
    /// Adds `item` if it fits; false if the page is full (the item is not added). An item
    /// counts as its JSON plus what escaping it as a string costs: behind API Gateway, the
    /// reply's body travels as a JSON string inside Lambda's response.
    pub fn push(&mut self, item: serde_json::Value) -> bool {
        let size = serde_json::to_vec(&item)
            .map(|b| b.len() + 1 + b.iter().filter(|c| matches!(c, b'"' | b'\\')).count())
            .unwrap_or(0);
        if !self.items.is_empty() && self.bytes + size > MAX_PAGE_BYTES {
            return false;
        }
        self.bytes += size;
        self.items.push(item);
        true
    }

    /// The items.
    pub fn into_items(self) -> Vec<serde_json::Value> {
        self.items
    }
}

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

/// One page of `items` that are ordered by a key unique within partition `pk` (a base-table
/// item's cursor is `(sk, pk, sk)`): sorted, cut at `limit`, with the token that continues
/// after the last one when more follow (`more`: beyond those given).
pub fn page_by_key<T>(
    mut items: Vec<(String, T)>,
    limit: usize,
    more: bool,
    pk: &str,
) -> (Vec<T>, Option<String>) {
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let more = more || items.len() > limit;
    items.truncate(limit);
    let token = match (more, items.last()) {
        (true, Some((last, _))) => {
            Some(encode_token(&(last.clone(), pk.to_string(), last.clone())))
        }
        _ => None,
    };
    (items.into_iter().map(|(_, v)| v).collect(), token)
}

/// Decodes a continuation token; a bad one is `400 InvalidRequestArguments`.
pub fn decode_token(t: &str) -> ApiResult<Cursor> {
    use base64::Engine;
    let bad = || ApiError::bad_argument("continuationToken is not valid");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(t)
        .map_err(|_| bad())?;
    let v: Vec<String> = crate::json::from_bytes(&bytes).map_err(|_| bad())?;
    match <[String; 3]>::try_from(v) {
        Ok([a, b, c]) => Ok((a, b, c)),
        Err(_) => Err(bad()),
    }
}
