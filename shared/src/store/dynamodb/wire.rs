//! DynamoDB's JSON protocol, spoken directly for the adapter's item requests.
//!
//! The SDK spent about as much CPU per request as a warm function's own work: its generic
//! request pipeline (interceptors, identity and endpoint resolution, builders and shapes
//! converted both ways) cost 0.275 ms of CPU for a GetItem that this client sends for about
//! 0.12 ms. What the SDK does that matters is kept, from the same configuration:
//! - the endpoint, from the SDK's own rules, resolved once;
//! - credentials from the configured provider, kept until shortly before they expire;
//! - SigV4 ([`super::sigv4`], checked against the SDK's own signer);
//! - the standard retry: up to `max_attempts` (3) per request, on transport errors, 5xx and
//!   throttling or transient codes, after a jittered exponential backoff, drawn from a retry
//!   quota so that an outage does not multiply the load;
//! - a timeout per attempt.
//!
//! The SDK stays for creating tables (and for S3).

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// An attribute value of the types the adapter writes; any other type read is kept as
/// [`Av::Other`] (DynamoDB's JSON of it dropped).
#[derive(Debug, Clone, PartialEq)]
pub enum Av {
    /// A string (`S`).
    S(String),
    /// A number, as DynamoDB's decimal text (`N`).
    N(String),
    /// Binary (`B`), decoded from its base64.
    B(Vec<u8>),
    /// Any other type (a list, map, set, boolean or null written by hand).
    Other,
}

impl Av {
    /// The string, if this is one.
    pub fn as_s(&self) -> Option<&str> {
        match self {
            Av::S(s) => Some(s),
            _ => None,
        }
    }

    /// The number's text, if this is one.
    pub fn as_n(&self) -> Option<&str> {
        match self {
            Av::N(n) => Some(n),
            _ => None,
        }
    }
}

/// An item, a key or a set of expression values.
pub type Attrs = HashMap<String, Av>;

impl Serialize for Av {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        let mut m = ser.serialize_map(Some(1))?;
        match self {
            Av::S(s) => m.serialize_entry("S", s)?,
            Av::N(n) => m.serialize_entry("N", n)?,
            Av::B(b) => {
                m.serialize_entry("B", &base64::engine::general_purpose::STANDARD.encode(b))?
            }
            Av::Other => m.serialize_entry("NULL", &true)?,
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Av {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Av;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a DynamoDB attribute value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Av, A::Error> {
                use base64::Engine;
                let mut out = Av::Other;
                while let Some(kind) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    out = match kind.as_ref() {
                        "S" => Av::S(map.next_value()?),
                        "N" => Av::N(map.next_value()?),
                        "B" => {
                            let text: std::borrow::Cow<'de, str> = map.next_value()?;
                            Av::B(
                                base64::engine::general_purpose::STANDARD
                                    .decode(text.as_bytes())
                                    .map_err(de::Error::custom)?,
                            )
                        }
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                            Av::Other
                        }
                    };
                }
                Ok(out)
            }
        }
        de.deserialize_map(V)
    }
}

/// A string value borrowed for a request (`{"S": …}`).
pub struct S<'a>(pub &'a str);

impl Serialize for S<'_> {
    fn serialize<Ser: Serializer>(&self, ser: Ser) -> Result<Ser::Ok, Ser::Error> {
        let mut m = ser.serialize_map(Some(1))?;
        m.serialize_entry("S", self.0)?;
        m.end()
    }
}

/// An item's primary key, borrowed.
#[derive(Serialize, Clone, Copy)]
pub struct Key<'a> {
    /// The partition key.
    pub pk: S<'a>,
    /// The sort key.
    pub sk: S<'a>,
}

impl Clone for S<'_> {
    fn clone(&self) -> Self {
        *self
    }
}
impl Copy for S<'_> {}

impl<'a> Key<'a> {
    /// The key `(pk, sk)`.
    pub fn new(pk: &'a str, sk: &'a str) -> Self {
        Key {
            pk: S(pk),
            sk: S(sk),
        }
    }
}

/// Pairs written as a JSON object (expression attribute names or values).
fn as_map<Ser: Serializer, V: Serialize>(
    pairs: &[(&str, V)],
    ser: Ser,
) -> Result<Ser::Ok, Ser::Error> {
    let mut m = ser.serialize_map(Some(pairs.len()))?;
    for (k, v) in pairs {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

/// A condition on the item written, with the names and values its expression uses.
#[derive(Serialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct Condition {
    /// The expression, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition_expression: Option<&'static str>,
    /// `#name` → attribute name.
    #[serde(serialize_with = "as_map", skip_serializing_if = "Vec::is_empty")]
    pub expression_attribute_names: Vec<(&'static str, &'static str)>,
    /// `:value` → value.
    #[serde(serialize_with = "as_map", skip_serializing_if = "Vec::is_empty")]
    pub expression_attribute_values: Vec<(&'static str, Av)>,
}

/// What every request asks for: its units per table and index.
const INDEXES: &str = "INDEXES";

fn indexes<Ser: Serializer>(_: &(), ser: Ser) -> Result<Ser::Ok, Ser::Error> {
    ser.serialize_str(INDEXES)
}

/// A GetItem.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct GetItem<'a> {
    /// The table's full name.
    pub table_name: &'a str,
    /// The item's key.
    pub key: Key<'a>,
    /// Strongly consistent.
    pub consistent_read: bool,
    /// Attributes to return (all when `None`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projection_expression: Option<&'static str>,
    /// `#name` → attribute name, for the projection.
    #[serde(serialize_with = "as_map", skip_serializing_if = "Vec::is_empty")]
    pub expression_attribute_names: Vec<(&'static str, &'static str)>,
    /// Always `INDEXES`.
    #[serde(serialize_with = "indexes")]
    pub return_consumed_capacity: (),
}

/// A PutItem.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PutItem<'a> {
    /// The table's full name.
    pub table_name: &'a str,
    /// The whole item.
    pub item: &'a Attrs,
    /// Its condition.
    #[serde(flatten)]
    pub condition: Condition,
    /// Always `INDEXES`.
    #[serde(serialize_with = "indexes")]
    pub return_consumed_capacity: (),
}

/// A DeleteItem, or a transaction's Delete or ConditionCheck.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeyWrite<'a> {
    /// The table's full name.
    pub table_name: &'a str,
    /// The item's key.
    pub key: Key<'a>,
    /// Its condition.
    #[serde(flatten)]
    pub condition: Condition,
    /// `INDEXES` for a DeleteItem; absent inside a transaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_consumed_capacity: Option<&'static str>,
}

/// A transaction's Put.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactPut<'a> {
    /// The table's full name.
    pub table_name: &'a str,
    /// The whole item.
    pub item: Attrs,
    /// Its condition.
    #[serde(flatten)]
    pub condition: Condition,
}

/// One item of a TransactWriteItems.
#[derive(Serialize)]
pub enum TransactItem<'a> {
    /// Writes an item.
    Put(TransactPut<'a>),
    /// Deletes one.
    Delete(KeyWrite<'a>),
    /// Only checks its condition.
    ConditionCheck(KeyWrite<'a>),
}

/// A TransactWriteItems.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactWrite<'a> {
    /// Its items, in order.
    pub transact_items: Vec<TransactItem<'a>>,
    /// Always `INDEXES`.
    #[serde(serialize_with = "indexes")]
    pub return_consumed_capacity: (),
}

/// A Query or a Scan.
#[derive(Serialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct Query<'a> {
    /// The table's full name.
    pub table_name: &'a str,
    /// The index read, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_name: Option<&'a str>,
    /// The key condition (Query).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_condition_expression: Option<&'a str>,
    /// Attributes to return (Scan).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projection_expression: Option<&'static str>,
    /// `#name` → attribute name.
    #[serde(serialize_with = "as_map", skip_serializing_if = "Vec::is_empty")]
    pub expression_attribute_names: Vec<(&'static str, &'a str)>,
    /// `:value` → value.
    #[serde(serialize_with = "as_map", skip_serializing_if = "Vec::is_empty")]
    pub expression_attribute_values: Vec<(&'static str, S<'a>)>,
    /// Where this page starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclusive_start_key: Option<Attrs>,
    /// At most this many items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `COUNT` to count only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub select: Option<&'static str>,
    /// Strongly consistent (a table's query only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consistent_read: Option<bool>,
    /// Always `INDEXES`.
    #[serde(serialize_with = "indexes")]
    pub return_consumed_capacity: (),
}

/// A BatchGetItem of one or more tables.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchGet<'a> {
    /// Table name → its keys.
    #[serde(serialize_with = "as_map")]
    pub request_items: Vec<(&'a str, &'a KeysAndAttributes)>,
    /// Always `INDEXES`.
    #[serde(serialize_with = "indexes")]
    pub return_consumed_capacity: (),
}

/// Capacity units of one table or index.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Capacity {
    /// Units consumed.
    pub capacity_units: Option<f64>,
}

/// What a request consumed (`ReturnConsumedCapacity: INDEXES`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Consumed {
    /// The table's full name.
    pub table_name: Option<String>,
    /// Units in all.
    pub capacity_units: Option<f64>,
    /// The table's own part.
    pub table: Option<Capacity>,
    /// Each global secondary index's part.
    pub global_secondary_indexes: Option<HashMap<String, Capacity>>,
}

/// An answer that carries one [`Consumed`] (GetItem, PutItem, DeleteItem).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ItemOut {
    /// The item read, if any (GetItem).
    pub item: Option<Attrs>,
    /// Units consumed.
    pub consumed_capacity: Option<Consumed>,
}

/// A Query's or Scan's page.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PageOut {
    /// The items (absent under `Select: COUNT`).
    #[serde(default)]
    pub items: Vec<Attrs>,
    /// How many matched.
    #[serde(default)]
    pub count: u64,
    /// Where the next page starts.
    pub last_evaluated_key: Option<Attrs>,
    /// Units consumed.
    pub consumed_capacity: Option<Consumed>,
}

/// Keys asked for in one table, and how (BatchGetItem).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeysAndAttributes {
    /// The keys.
    pub keys: Vec<Attrs>,
    /// Strongly consistent reads.
    #[serde(default)]
    pub consistent_read: bool,
}

/// A BatchGetItem's answer.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchGetOut {
    /// Items found, per table.
    #[serde(default)]
    pub responses: HashMap<String, Vec<Attrs>>,
    /// Keys left for another request, per table.
    #[serde(default)]
    pub unprocessed_keys: HashMap<String, KeysAndAttributes>,
    /// Units consumed, per table.
    #[serde(default)]
    pub consumed_capacity: Vec<Consumed>,
}

/// A TransactWriteItems' answer.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactOut {
    /// Units consumed, per table.
    #[serde(default)]
    pub consumed_capacity: Vec<Consumed>,
}

/// Why one item of a cancelled transaction failed (`None` code: it did not).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Reason {
    /// `ConditionalCheckFailed`, `TransactionConflict`, `None`, ….
    pub code: Option<String>,
}

/// A failed request.
#[derive(Debug)]
pub enum WireError {
    /// DynamoDB's answer: its error code (the part of `__type` after `#`), its message, and a
    /// cancelled transaction's reasons.
    Service {
        /// The error code, such as `ConditionalCheckFailedException`.
        code: String,
        /// DynamoDB's message.
        message: String,
        /// Per item of a cancelled transaction, in order.
        reasons: Vec<Reason>,
    },
    /// No answer: the connection, a timeout, credentials or signing.
    Transport(String),
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "__type", default)]
    kind: String,
    #[serde(alias = "Message", default)]
    message: String,
    #[serde(rename = "CancellationReasons", default)]
    reasons: Vec<Reason>,
}

/// Error codes the standard retry treats as throttling.
pub const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Error codes the standard retry treats as transient.
const TRANSIENT_CODES: &[&str] = &["RequestTimeout", "RequestTimeoutException"];

/// The retry quota's size, and what a retry takes from it (a timed-out attempt twice as much),
/// as the SDK's standard retry.
const QUOTA: i64 = 500;
const RETRY_COST: i64 = 5;
const TIMEOUT_RETRY_COST: i64 = 10;

/// Credentials are fetched again this long before they expire.
const CREDENTIALS_MARGIN: Duration = Duration::from_secs(300);

/// A connection must be made within this long unless the configuration says otherwise (the
/// SDK's default).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(3100);

const X_AMZ_TARGET: http::HeaderName = http::HeaderName::from_static("x-amz-target");
const X_AMZ_DATE: http::HeaderName = http::HeaderName::from_static("x-amz-date");
const X_AMZ_SECURITY_TOKEN: http::HeaderName =
    http::HeaderName::from_static("x-amz-security-token");

/// The HTTP client: hyper's pooled client over rustls, as the SDK's own. `reqwest` on top of it
/// added its layers (redirects, a URL parsed back from every response): 4 % of a warm
/// claimWork's CPU.
type Http = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Full<bytes::Bytes>,
>;

/// An error with its causes: hyper's own says only "client error (Connect)".
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// A client for an `https` endpoint or a plain one: TLS trusts `roots`, else the system's (as
/// the SDK's client does); a plain `http` endpoint (LocalStack, DynamoDB Local) needs none, so
/// none are loaded.
fn http_client(
    https: bool,
    connect_timeout: Duration,
    roots: Option<rustls::RootCertStore>,
) -> Result<Http, String> {
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    // A request is written as two pieces (head, body): without this, Nagle's algorithm holds
    // the body for the server's delayed ACK.
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect_timeout));
    tcp.set_keepalive(Some(Duration::from_secs(15)));
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder = match roots {
        None if https => builder
            .with_provider_and_native_roots(provider)
            .map_err(|e| format!("TLS roots: {e}"))?,
        roots => {
            let tls = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots.unwrap_or_else(rustls::RootCertStore::empty))
                .with_no_client_auth();
            builder.with_tls_config(tls)
        }
    };
    let https = builder.https_or_http().enable_http1().wrap_connector(tcp);
    Ok(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(https),
    )
}

/// A DynamoDB client for the operations the adapter sends.
pub struct Wire {
    /// Built at the first request: its TLS set-up (the system's root certificates) is a
    /// quarter of a cold start's CPU, which a process that never reaches DynamoDB need not pay.
    http: std::sync::OnceLock<Http>,
    attempt_timeout: Duration,
    connect_timeout: Duration,
    /// Parsed once: parsing it at every request was 3 % of a warm claimWork's CPU.
    uri: http::Uri,
    signer: super::sigv4::Signer,
    provider: Option<aws_sdk_dynamodb::config::SharedCredentialsProvider>,
    /// Credentials kept, with when to fetch them again.
    identity: Mutex<Option<(aws_sdk_dynamodb::config::Credentials, Option<SystemTime>)>>,
    max_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    quota: AtomicI64,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").field("uri", &self.uri).finish()
    }
}

/// The configured DynamoDB endpoint URL, if any: `AWS_ENDPOINT_URL_DYNAMODB` (or the profile's),
/// else `AWS_ENDPOINT_URL`, as the SDK's DynamoDB client reads them.
fn configured_url(cfg: &aws_config::SdkConfig) -> Option<String> {
    let key = aws_types::service_config::ServiceConfigKey::builder()
        .service_id("DynamoDB")
        .env("AWS_ENDPOINT_URL")
        .profile("endpoint_url")
        .build()
        .ok()?;
    if cfg.get_origin("endpoint_url").is_client_config() {
        return cfg.endpoint_url().map(String::from);
    }
    cfg.service_config()
        .and_then(|c| c.load_config(key))
        .or_else(|| cfg.endpoint_url().map(String::from))
}

impl Wire {
    /// A client from the SDK's configuration (region, endpoint, credentials, retry and
    /// timeouts as the SDK's DynamoDB client would take them).
    pub fn new(cfg: &aws_config::SdkConfig) -> Result<Wire, String> {
        use aws_sdk_dynamodb::config::endpoint::{DefaultResolver, Params, ResolveEndpoint};
        use futures_util::FutureExt;
        let region = cfg
            .region()
            .ok_or("AWS_REGION (or AWS_DEFAULT_REGION) is not set")?
            .to_string();
        let params = Params::builder()
            .region(&region)
            .use_fips(cfg.use_fips().unwrap_or(false))
            .use_dual_stack(cfg.use_dual_stack().unwrap_or(false))
            .set_endpoint(configured_url(cfg))
            .build()
            .map_err(|e| e.to_string())?;
        // The rules are computed in place: their future is ready at once.
        let endpoint = DefaultResolver::new()
            .resolve_endpoint(&params)
            .now_or_never()
            .ok_or("the endpoint rules did not answer at once")?
            .map_err(|e| format!("no DynamoDB endpoint: {e}"))?;
        let retry = cfg
            .retry_config()
            .cloned()
            .unwrap_or_else(aws_sdk_dynamodb::config::retry::RetryConfig::standard);
        let timeouts = cfg.timeout_config();
        let attempt_timeout = timeouts
            .and_then(|t| t.operation_attempt_timeout())
            .unwrap_or(super::ATTEMPT_TIMEOUT);
        let connect_timeout = timeouts
            .and_then(|t| t.connect_timeout())
            .unwrap_or(CONNECT_TIMEOUT);
        let url =
            url::Url::parse(endpoint.url()).map_err(|e| format!("{e}: {}", endpoint.url()))?;
        let uri = url
            .as_str()
            .parse::<http::Uri>()
            .map_err(|e| format!("{e}: {url}"))?;
        let host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            (None, _) => return Err(format!("no host in {url}")),
        };
        Ok(Wire {
            signer: super::sigv4::Signer::new(&region, &host, url.path()),
            uri,
            http: std::sync::OnceLock::new(),
            attempt_timeout,
            connect_timeout,
            provider: cfg.credentials_provider(),
            identity: Mutex::new(None),
            max_attempts: retry.max_attempts().max(1),
            initial_backoff: retry.initial_backoff(),
            max_backoff: retry.max_backoff(),
            quota: AtomicI64::new(QUOTA),
        })
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> String {
        self.uri.to_string()
    }

    /// The credentials to sign with: the kept ones, or the provider's when they are about to
    /// expire (each instance fetches its own; nothing is shared between instances).
    async fn credentials(&self) -> Result<aws_sdk_dynamodb::config::Credentials, WireError> {
        use aws_sdk_dynamodb::config::ProvideCredentials;
        let now = SystemTime::now();
        if let Ok(kept) = self.identity.lock() {
            if let Some((creds, refresh)) = kept.as_ref() {
                if refresh.is_none_or(|at| now < at) {
                    return Ok(creds.clone());
                }
            }
        }
        let provider = self
            .provider
            .as_ref()
            .ok_or_else(|| WireError::Transport("no AWS credentials are configured".into()))?;
        let creds = provider
            .provide_credentials()
            .await
            .map_err(|e| WireError::Transport(format!("credentials: {e}")))?;
        let refresh = creds
            .expiry()
            .map(|at| at.checked_sub(CREDENTIALS_MARGIN).unwrap_or(at));
        if let Ok(mut kept) = self.identity.lock() {
            *kept = Some((creds.clone(), refresh));
        }
        Ok(creds)
    }

    /// Sends one operation (`GetItem`, …) with `input` as its body and reads its answer,
    /// retrying as the module's header says.
    pub async fn call<I: Serialize, O: serde::de::DeserializeOwned>(
        &self,
        operation: &'static str,
        input: &I,
    ) -> Result<O, WireError> {
        let body: bytes::Bytes = serde_json::to_vec(input)
            .map_err(|e| WireError::Transport(e.to_string()))?
            .into();
        let target = format!("DynamoDB_20120810.{operation}");
        let mut taken = 0;
        let mut attempt = 1;
        loop {
            let (res, timed_out) = match self.attempt(&target, &body).await {
                Ok(bytes) => {
                    // A retried request that succeeds gives its quota back.
                    self.quota.fetch_add(taken, Ordering::Relaxed);
                    return crate::json::from_bytes(&bytes)
                        .map_err(|e| WireError::Transport(format!("{operation}'s answer: {e}")));
                }
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Retryable(e, timed_out)) => (e, timed_out),
            };
            let cost = if timed_out {
                TIMEOUT_RETRY_COST
            } else {
                RETRY_COST
            };
            if attempt >= self.max_attempts || !self.take_quota(cost) {
                return Err(res);
            }
            taken += cost;
            tokio::time::sleep(self.backoff(attempt)).await;
            attempt += 1;
        }
    }

    /// Takes `cost` from the retry quota if it holds that much.
    fn take_quota(&self, cost: i64) -> bool {
        self.quota
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
                (q >= cost).then_some(q - cost)
            })
            .is_ok()
    }

    /// Full jitter: a random part of `initial_backoff × 2^(attempt-1)`, at most `max_backoff`.
    fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .initial_backoff
            .saturating_mul(1 << (attempt - 1).min(16))
            .min(self.max_backoff);
        ceiling.mul_f64(rand::random::<f64>())
    }

    async fn attempt(&self, target: &str, body: &bytes::Bytes) -> Result<bytes::Bytes, Attempt> {
        let creds = self.credentials().await.map_err(Attempt::Final)?;
        let signed = self
            .signer
            .sign(
                creds.access_key_id(),
                creds.secret_access_key(),
                creds.session_token(),
                target,
                body,
                SystemTime::now(),
            )
            .map_err(|e| Attempt::Final(WireError::Transport(format!("signing: {e}"))))?;
        let header = |v: &str| {
            http::HeaderValue::from_str(v)
                .map_err(|e| Attempt::Final(WireError::Transport(e.to_string())))
        };
        let mut req = http::Request::new(http_body_util::Full::new(body.clone()));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = self.uri.clone();
        let headers = req.headers_mut();
        headers.reserve(6);
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(super::sigv4::CONTENT_TYPE),
        );
        headers.insert(X_AMZ_TARGET, header(target)?);
        headers.insert(X_AMZ_DATE, header(&signed.amz_date)?);
        headers.insert(http::header::AUTHORIZATION, header(&signed.authorization)?);
        if let Some(token) = creds.session_token() {
            headers.insert(X_AMZ_SECURITY_TOKEN, header(token)?);
        }
        let http = match self.http.get() {
            Some(http) => http,
            None => {
                let https = self.uri.scheme() == Some(&http::uri::Scheme::HTTPS);
                let built = http_client(https, self.connect_timeout, None)
                    .map_err(|e| Attempt::Final(WireError::Transport(e)))?;
                self.http.get_or_init(|| built)
            }
        };
        let exchange = async {
            use http_body_util::BodyExt;
            let res = http
                .request(req)
                .await
                .map_err(|e| WireError::Transport(causes(&e)))?;
            let status = res.status();
            let bytes = res
                .into_body()
                .collect()
                .await
                .map_err(|e| WireError::Transport(causes(&e)))?
                .to_bytes();
            Ok::<_, WireError>((status, bytes))
        };
        let (status, bytes) = match tokio::time::timeout(self.attempt_timeout, exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return Err(Attempt::Retryable(e, false)),
            Err(_) => {
                let e = format!("no answer within {:?}", self.attempt_timeout);
                return Err(Attempt::Retryable(WireError::Transport(e), true));
            }
        };
        if status.is_success() {
            return Ok(bytes);
        }
        let parsed: Option<ErrorBody> = crate::json::from_bytes(&bytes).ok();
        let err = match parsed {
            Some(b) => WireError::Service {
                code: b.kind.rsplit('#').next().unwrap_or_default().to_string(),
                message: b.message,
                reasons: b.reasons,
            },
            None => WireError::Service {
                code: String::new(),
                message: format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes)),
                reasons: vec![],
            },
        };
        let retry = match &err {
            WireError::Service { code, .. } => {
                matches!(status.as_u16(), 500 | 502 | 503 | 504)
                    || THROTTLING_CODES.contains(&code.as_str())
                    || TRANSIENT_CODES.contains(&code.as_str())
            }
            WireError::Transport(_) => true,
        };
        Err(if retry {
            Attempt::Retryable(err, false)
        } else {
            Attempt::Final(err)
        })
    }
}

/// One attempt's failure: worth another attempt (and whether it timed out), or not.
enum Attempt {
    Retryable(WireError, bool),
    Final(WireError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values go out and come back in DynamoDB's JSON; a type the adapter does not write is
    /// read as `Other` without failing the item.
    #[test]
    fn attribute_values_round_trip_through_dynamodbs_json() {
        let item = Attrs::from([
            ("pk".to_string(), Av::S("a\"b".into())),
            ("v".to_string(), Av::N("42".into())),
            ("d".to_string(), Av::B(vec![0, 255, 7])),
        ]);
        let json = serde_json::to_value(&item).unwrap();
        assert_eq!(json["d"], serde_json::json!({"B": "AP8H"}));
        assert_eq!(json["v"], serde_json::json!({"N": "42"}));
        let back: Attrs = serde_json::from_value(json).unwrap();
        assert_eq!(back, item);
        let hand: Attrs =
            serde_json::from_str(r#"{"l":{"L":[{"S":"x"}]},"b":{"BOOL":true},"s":{"S":"y"}}"#)
                .unwrap();
        assert_eq!(hand["l"], Av::Other);
        assert_eq!(hand["b"], Av::Other);
        assert_eq!(hand["s"].as_s(), Some("y"));
        let bad: Result<Attrs, _> = serde_json::from_str(r#"{"d":{"B":"!!"}}"#);
        assert!(bad.is_err(), "binary that is not base64");
    }

    /// A DynamoDB stand-in that answers each request with the next of `answers` (status and
    /// body) and hands back the requests' heads: LocalStack cannot be made to fail on demand.
    async fn answering(
        answers: Vec<(u16, &'static str)>,
    ) -> (String, tokio::task::JoinHandle<Vec<String>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let mut heads = vec![];
            for (status, body) in answers {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = 0;
                // The head, then as many body bytes as it announces.
                loop {
                    got += conn.read(&mut buf[got..]).await.unwrap();
                    let text = String::from_utf8_lossy(&buf[..got]).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len: usize = text
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length: ")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        if got >= end + 4 + len {
                            heads.push(text[..end].to_string());
                            break;
                        }
                    }
                }
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                conn.write_all(answer.as_bytes()).await.unwrap();
            }
            heads
        });
        (url, server)
    }

    fn config(url: &str, token: Option<&str>) -> aws_config::SdkConfig {
        use aws_sdk_dynamodb::config::retry::RetryConfig;
        let creds = aws_sdk_dynamodb::config::Credentials::new(
            "AKIDTEST",
            "secret",
            token.map(String::from),
            None,
            "test",
        );
        aws_config::SdkConfig::builder()
            .region(aws_config::Region::from_static("eu-west-1"))
            .endpoint_url(url)
            .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(
                creds,
            ))
            .retry_config(RetryConfig::standard().with_initial_backoff(Duration::from_millis(1)))
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build()
    }

    fn get() -> GetItem<'static> {
        GetItem {
            table_name: "t",
            key: Key::new("a", "b"),
            consistent_read: true,
            projection_expression: None,
            expression_attribute_names: vec![],
            return_consumed_capacity: (),
        }
    }

    /// Server errors and throttling are retried, up to three attempts in all; a failed
    /// condition is answered at once; every request is signed for DynamoDB in the region.
    #[tokio::test]
    async fn the_standard_retry_retries_server_errors_and_throttling_up_to_three_attempts() {
        let throttled = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"slow down"}"#;
        let found = r#"{"Item":{"pk":{"S":"a"},"sk":{"S":"b"}},"ConsumedCapacity":{"TableName":"t","CapacityUnits":1.0}}"#;
        let (url, server) = answering(vec![(503, "{}"), (400, throttled), (200, found)]).await;
        let wire = Wire::new(&config(&url, Some("session"))).unwrap();
        let out: ItemOut = wire.call("GetItem", &get()).await.expect("third attempt");
        assert_eq!(out.item.unwrap()["sk"].as_s(), Some("b"));
        assert_eq!(out.consumed_capacity.unwrap().capacity_units, Some(1.0));
        let heads = server.await.unwrap();
        assert_eq!(heads.len(), 3);
        for head in &heads {
            let head = head.to_ascii_lowercase();
            assert!(
                head.contains("x-amz-target: dynamodb_20120810.getitem"),
                "{head}"
            );
            assert!(head.contains("credential=akidtest/"), "{head}");
            assert!(head.contains("/eu-west-1/dynamodb/aws4_request"), "{head}");
            assert!(head.contains("x-amz-security-token: session"), "{head}");
        }

        let (url, server) = answering(vec![(500, "{}"); 3]).await;
        let wire = Wire::new(&config(&url, None)).unwrap();
        let err = wire
            .call::<_, ItemOut>("GetItem", &get())
            .await
            .unwrap_err();
        assert!(matches!(err, WireError::Service { .. }), "{err:?}");
        assert_eq!(server.await.unwrap().len(), 3, "three attempts, no more");

        let failed = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}"#;
        let (url, server) = answering(vec![(400, failed)]).await;
        let wire = Wire::new(&config(&url, None)).unwrap();
        match wire.call::<_, ItemOut>("GetItem", &get()).await {
            Err(WireError::Service { code, message, .. }) => {
                assert_eq!(code, "ConditionalCheckFailedException");
                assert_eq!(message, "The conditional request failed");
            }
            other => panic!("{other:?}"),
        }
        let heads = server.await.unwrap();
        assert_eq!(heads.len(), 1, "not retried");
        assert!(!heads[0]
            .to_ascii_lowercase()
            .contains("x-amz-security-token"));
    }

    /// Requests to an `https` endpoint go over TLS and check the server's certificate: a
    /// server whose issuer is not trusted is refused, and one whose issuer is trusted answers.
    #[tokio::test]
    async fn https_endpoints_are_reached_over_verified_tls() {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let ca = CertificateDer::from_pem_slice(include_bytes!("test-tls/ca.pem")).unwrap();
        let leaf = CertificateDer::from_pem_slice(include_bytes!("test-tls/leaf.pem")).unwrap();
        let key = PrivateKeyDer::from_pem_slice(include_bytes!("test-tls/leaf.key")).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf, ca.clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "https://localhost:{}",
            listener.local_addr().unwrap().port()
        );
        let found = r#"{"Item":{"pk":{"S":"a"},"sk":{"S":"b"}}}"#;
        let server = tokio::spawn(async move {
            let mut served = 0;
            // The untrusted client's attempts fail in the handshake; the trusted one's request
            // is answered.
            while served < 1 {
                let (tcp, _) = listener.accept().await.unwrap();
                let Ok(mut conn) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut buf = vec![0u8; 16 * 1024];
                let mut got = 0;
                while !String::from_utf8_lossy(&buf[..got]).contains("}") {
                    match conn.read(&mut buf[got..]).await.unwrap() {
                        0 => panic!("the client closed before its request's body"),
                        n => got += n,
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{found}",
                    found.len()
                );
                conn.write_all(answer.as_bytes()).await.unwrap();
                conn.shutdown().await.unwrap();
                served += 1;
            }
        });

        let untrusted = Wire::new(&config(&url, None)).unwrap();
        let empty = rustls::RootCertStore::empty();
        let client = http_client(true, CONNECT_TIMEOUT, Some(empty)).unwrap();
        assert!(untrusted.http.set(client).is_ok());
        match untrusted.call::<_, ItemOut>("GetItem", &get()).await {
            Err(WireError::Transport(e)) => assert!(e.contains("certificate"), "{e}"),
            other => panic!("an untrusted server answered: {other:?}"),
        }

        let trusted = Wire::new(&config(&url, None)).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let client = http_client(true, CONNECT_TIMEOUT, Some(roots)).unwrap();
        assert!(trusted.http.set(client).is_ok());
        let out: ItemOut = trusted.call("GetItem", &get()).await.expect("over TLS");
        assert_eq!(out.item.unwrap()["sk"].as_s(), Some("b"));
        server.await.unwrap();
    }

    /// When retries keep failing across requests, the quota runs out and requests fail after
    /// one attempt, so that an outage does not triple the load on the table.
    #[tokio::test]
    async fn an_exhausted_retry_quota_stops_retries() {
        let (url, server) = answering(vec![(500, "{}"); 2]).await;
        let wire = Wire::new(&config(&url, None)).unwrap();
        wire.quota.store(RETRY_COST, Ordering::Relaxed);
        assert!(wire.call::<_, ItemOut>("GetItem", &get()).await.is_err());
        assert_eq!(
            server.await.unwrap().len(),
            2,
            "one retry, paid by the last of the quota"
        );
        assert_eq!(wire.quota.load(Ordering::Relaxed), 0);
    }
}
