//! Delegated authentication: every request is checked by an existing deployment's auth
//! service (`POST <root>/api/auth/v1/authenticate-hawk`), as upstream's own services check
//! theirs, so that this queue can stand in for an existing deployment's queue with that
//! deployment's clients and roles.
//!
//! Answers are cached for [`CACHE_TTL`], in at most [`CACHE_BYTES`]: a signed request's answer
//! is keyed by everything the signature covers, so only a repeat of the same signed request (a
//! signed URL fetched again, a retry) hits; unsigned requests share one entry, the anonymous
//! scopes, and hit nearly always. A repeat within the TTL is accepted as the deployment
//! accepted it, as Hawk's own 60 s clock skew already allows. The payload hash the client
//! signed is checked here, against the body the deployment never sees.

use super::{hawk, Authenticated, Outcome, RequestFacts};
use crate::error::ApiError;
use crate::time::Ts;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How long an answer is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// The most the cached answers may take, by their scopes' and messages' lengths.
pub const CACHE_BYTES: usize = 4 << 20;
/// Longest wait for the deployment's answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What one request's authentication cost: a cached answer, or a call to the deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Answered from the cache.
    Hit,
    /// Asked the deployment.
    Miss,
}

struct Entry {
    outcome: Outcome,
    /// Wall time, not a process clock: a Lambda instance's monotonic clock may stand still
    /// while it is frozen, which would stretch the entry's life past [`CACHE_TTL`].
    until: Ts,
    bytes: usize,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<[u8; 32], Entry>,
    /// Keys, oldest first, for eviction by bytes.
    order: VecDeque<[u8; 32]>,
    bytes: usize,
}

/// An existing deployment's auth service.
pub struct RemoteAuth {
    url: String,
    http: reqwest::Client,
    cache: Mutex<Cache>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl RemoteAuth {
    /// Authentication through the deployment at `root_url` (`https://tc.example.com`).
    pub fn new(root_url: &str) -> Self {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .unwrap_or_default();
        RemoteAuth {
            url: format!(
                "{}/api/auth/v1/authenticate-hawk",
                root_url.trim_end_matches('/')
            ),
            http,
            cache: Mutex::new(Cache::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Cache hits and misses so far.
    pub fn lookups(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Authenticates a request at `now` through the deployment (or its cached answer);
    /// `500` when the deployment cannot answer.
    pub async fn authenticate(
        &self,
        req: &RequestFacts<'_>,
        now: Ts,
    ) -> Result<(Outcome, Lookup), ApiError> {
        let key = cache_key(req);
        let (outcome, lookup) = match self.cached(&key, now) {
            Some(o) => (o, Lookup::Hit),
            None => {
                let o = self.ask(req, now).await?;
                self.keep(key, &o, now);
                (o, Lookup::Miss)
            }
        };
        let counter = match lookup {
            Lookup::Hit => &self.hits,
            Lookup::Miss => &self.misses,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok((check_payload(outcome, req), lookup))
    }

    fn cached(&self, key: &[u8; 32], now: Ts) -> Option<Outcome> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .entries
            .get(key)
            .filter(|e| e.until.millis() > now.millis())
            .map(|e| e.outcome.clone())
    }

    fn keep(&self, key: [u8; 32], outcome: &Outcome, now: Ts) {
        // Never past the credentials' own expiry.
        let ttl = match outcome {
            Outcome::Success(a) => a.expires.map_or(CACHE_TTL, |e| {
                CACHE_TTL.min(Duration::from_millis(
                    (e.millis() - now.millis()).max(0) as u64
                ))
            }),
            Outcome::Failed(_) => CACHE_TTL,
        };
        let bytes = 64
            + match outcome {
                Outcome::Success(a) => {
                    a.scopes
                        .iter()
                        .chain(&a.given)
                        .map(String::len)
                        .sum::<usize>()
                        + a.client_id.as_deref().map_or(0, str::len)
                }
                Outcome::Failed(m) => m.len(),
            };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = cache.entries.remove(&key) {
            cache.bytes -= old.bytes;
            // Only then is the key in the order (a scan, so not on every miss).
            cache.order.retain(|k| k != &key);
        }
        while cache.bytes + bytes > CACHE_BYTES {
            let Some(oldest) = cache.order.pop_front() else {
                break;
            };
            if let Some(e) = cache.entries.remove(&oldest) {
                cache.bytes -= e.bytes;
            }
        }
        if bytes > CACHE_BYTES {
            return;
        }
        cache.order.push_back(key);
        cache.bytes += bytes;
        let until = now.plus(ttl.as_millis() as i64);
        cache.entries.insert(
            key,
            Entry {
                outcome: outcome.clone(),
                until,
                bytes,
            },
        );
    }

    async fn ask(&self, req: &RequestFacts<'_>, now: Ts) -> Result<Outcome, ApiError> {
        let mut body = json!({
            "method": req.method.to_ascii_lowercase(),
            "resource": req.resource,
            "host": req.host,
            "port": req.port,
        });
        if let Some(a) = req.authorization {
            body["authorization"] = json!(a);
        }
        let unreachable = |e: String| {
            ApiError::internal(format!("the deployment's auth service ({}): {e}", self.url))
        };
        let resp = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let status = resp.status();
        let answer: Value = resp.json().await.map_err(|e| unreachable(e.to_string()))?;
        if !status.is_success() {
            return Err(unreachable(format!("{status}: {answer}")));
        }
        outcome_of(&answer, now).map_err(unreachable)
    }
}

/// The cache key: every part of the request the signature covers (one key for every
/// unsigned request, whose answer is the anonymous scopes).
fn cache_key(req: &RequestFacts<'_>) -> [u8; 32] {
    let mut h = Sha256::new();
    let (_, bewit) = hawk::strip_bewit(req.resource);
    if req.authorization.is_some() || bewit.is_some() {
        for part in [
            req.method.to_ascii_lowercase().as_str(),
            req.resource,
            req.host,
            &req.port.to_string(),
            req.authorization.unwrap_or_default(),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
    } else {
        h.update(b"anonymous");
    }
    h.finalize().into()
}

/// The deployment's answer (upstream's `authenticate-hawk-response`) as an [`Outcome`].
fn outcome_of(answer: &Value, now: Ts) -> Result<Outcome, String> {
    let scopes = || crate::json::string_list(&answer["scopes"]);
    match answer["status"].as_str() {
        Some("auth-success") => {
            let expires = answer["expires"].as_str().and_then(Ts::parse);
            if expires.is_some_and(|e| e.millis() <= now.millis()) {
                return Ok(Outcome::Failed("Credentials have expired".into()));
            }
            Ok(Outcome::Success(Authenticated {
                client_id: answer["clientId"].as_str().map(String::from),
                scopes: scopes(),
                given: scopes(),
                expires,
                hash: answer["hash"].as_str().map(String::from),
            }))
        }
        Some("no-auth") => Ok(Outcome::Success(Authenticated {
            client_id: None,
            scopes: scopes(),
            given: vec![],
            expires: None,
            hash: None,
        })),
        Some("auth-failed") => Ok(Outcome::Failed(
            answer["message"]
                .as_str()
                .unwrap_or("authentication failed")
                .to_string(),
        )),
        other => Err(format!("an answer with status {other:?}")),
    }
}

/// The outcome, refused if the client signed a payload hash the body does not have.
fn check_payload(outcome: Outcome, req: &RequestFacts<'_>) -> Outcome {
    if let (Outcome::Success(a), Some((content_type, body))) = (&outcome, req.payload) {
        if let Some(sent) = &a.hash {
            if !hawk::ct_eq(sent, &hawk::payload_hash(content_type, body)) {
                return Outcome::Failed("bad payload hash".into());
            }
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(resource: &'a str, authorization: Option<&'a str>) -> RequestFacts<'a> {
        RequestFacts {
            method: "GET",
            resource,
            host: "h",
            port: 80,
            authorization,
            payload: None,
        }
    }

    #[test]
    fn unsigned_requests_share_one_key_and_signed_ones_differ_by_every_part() {
        assert_eq!(cache_key(&facts("/a", None)), cache_key(&facts("/b", None)));
        let signed = cache_key(&facts("/a", Some("Hawk id=\"x\"")));
        assert_ne!(signed, cache_key(&facts("/b", Some("Hawk id=\"x\""))));
        assert_ne!(signed, cache_key(&facts("/a", Some("Hawk id=\"y\""))));
        assert_ne!(signed, cache_key(&facts("/a", None)));
        assert_ne!(
            cache_key(&facts("/a?bewit=abc", None)),
            cache_key(&facts("/a", None))
        );
    }

    #[test]
    fn the_cache_keeps_within_its_bytes_and_drops_the_oldest() {
        let remote = RemoteAuth::new("http://127.0.0.1:9");
        let big = Outcome::Failed("x".repeat(CACHE_BYTES / 3));
        for i in 0..5u8 {
            remote.keep([i; 32], &big, Ts::now());
        }
        let cache = remote.cache.lock().unwrap_or_else(|p| p.into_inner());
        assert!(cache.bytes <= CACHE_BYTES, "{}", cache.bytes);
        assert_eq!(cache.entries.len(), 2);
        assert!(cache.entries.contains_key(&[4; 32]));
        assert!(!cache.entries.contains_key(&[0; 32]));
    }

    #[test]
    fn an_answer_is_kept_for_the_ttl_by_wall_time() {
        let remote = RemoteAuth::new("http://127.0.0.1:9");
        let no = Outcome::Failed("no".into());
        let t = Ts(1_000_000);
        remote.keep([1; 32], &no, t);
        let ttl = CACHE_TTL.as_millis() as i64;
        assert_eq!(remote.cached(&[1; 32], t.plus(ttl - 1)), Some(no));
        assert_eq!(remote.cached(&[1; 32], t.plus(ttl)), None);
    }

    #[test]
    fn a_signed_hash_must_be_the_bodys() {
        let ok = Outcome::Success(Authenticated {
            client_id: Some("c".into()),
            scopes: vec![],
            given: vec![],
            expires: None,
            hash: Some(hawk::payload_hash("application/json", b"{}")),
        });
        let mut f = facts("/a", Some("Hawk"));
        f.payload = Some(("application/json", b"{}"));
        assert_eq!(check_payload(ok.clone(), &f), ok);
        f.payload = Some(("application/json", b"{\"a\":1}"));
        assert_eq!(
            check_payload(ok, &f),
            Outcome::Failed("bad payload hash".into())
        );
    }
}
