//! Authentication of API requests: the request's signature becomes a [`Caller`] (see
//! [`crate::auth`] for the rules), and every endpoint then checks its exact scope expression
//! with [`Caller::authorize`].

use super::ApiRequest;
use crate::auth::remote::{Lookup, RemoteAuth};
use crate::auth::{auth_failed, AuthService, Authenticated, Outcome, Realm, RequestFacts};
use crate::error::{ApiError, ErrorCode};
use crate::metrics::Metrics;
use crate::scopes::ScopeExpr;
use crate::time::Ts;
use serde_json::json;

/// An authenticated caller and its (expanded) scopes.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The clientId, if the request was signed.
    pub client_id: Option<String>,
    /// Every scope the caller holds.
    pub scopes: Vec<String>,
    /// Its scopes as given, before expansion ([`Authenticated::given`]).
    pub given: Vec<String>,
}

impl Caller {
    /// `403 InsufficientScopes` unless the caller satisfies `expr`.
    pub fn authorize(&self, expr: &ScopeExpr) -> Result<(), ApiError> {
        match expr.unsatisfied(&self.scopes) {
            None => Ok(()),
            Some(missing) => Err(ApiError::new(
                ErrorCode::InsufficientScopes,
                format!(
                    "Client {} lacks scopes.\nRequired: {}\nUnsatisfied: {}",
                    self.client_id.as_deref().unwrap_or("(anonymous)"),
                    expr.to_json(),
                    missing.to_json()
                ),
            )
            .with_details(json!({ "required": expr.to_json(), "unsatisfied": missing.to_json() }))),
        }
    }
}

impl From<Authenticated> for Caller {
    fn from(a: Authenticated) -> Self {
        Caller {
            client_id: a.client_id,
            scopes: a.scopes,
            given: a.given,
        }
    }
}

fn header<'a>(req: &'a ApiRequest, name: &str) -> Option<&'a str> {
    req.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Host and port as the client signed them: the `Host` header, with the port from
/// `x-forwarded-port` (behind a proxy or API Gateway), else from `Host`, else the scheme's.
pub fn host_and_port(req: &ApiRequest) -> (String, u16) {
    let host_header = header(req, "host").unwrap_or_default();
    let (host, port) = match host_header.rsplit_once(':') {
        // `[::1]:8080`, or `name:8080`; a bare IPv6 address has `]` after the last colon.
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            (h, p.parse::<u16>().ok())
        }
        _ => (host_header, None),
    };
    let forwarded = header(req, "x-forwarded-port").and_then(|p| p.trim().parse::<u16>().ok());
    let https = header(req, "x-forwarded-proto").is_some_and(|p| p.eq_ignore_ascii_case("https"));
    let port = forwarded.or(port).unwrap_or(if https { 443 } else { 80 });
    (host.to_ascii_lowercase(), port)
}

/// The header the template's HTTP proxy integration to the claim service sets (overwriting
/// whatever the client sent) to the domain the client called.
pub const GATEWAY_HOST_HEADER: &str = "x-tcq-forwarded-host";

/// The header the same integration sets to the gateway's id for the request.
pub const GATEWAY_REQUEST_ID_HEADER: &str = "x-tcq-request-id";

/// The host a client behind API Gateway's HTTP proxy integration signed: the
/// [`GATEWAY_HOST_HEADER`] the integration sets, else the gateway's `Forwarded` element.
pub fn gateway_host(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get(GATEWAY_HOST_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(String::from)
        .or_else(|| forwarded_host(headers))
}

/// The host the client asked for, as a proxy in front (API Gateway's HTTP proxy
/// integration) records it: the `host` of the last element of the `Forwarded` headers (RFC
/// 7239) that has one, as a proxy appends its own element after any the client sent.
pub fn forwarded_host(headers: &http::HeaderMap) -> Option<String> {
    let mut found = None;
    for v in headers.get_all("forwarded") {
        let Ok(v) = v.to_str() else { continue };
        for element in v.split(',') {
            for pair in element.split(';') {
                if let Some((k, v)) = pair.trim().split_once('=') {
                    if k.trim().eq_ignore_ascii_case("host") {
                        let v = v.trim().trim_matches('"');
                        if !v.is_empty() {
                            found = Some(v.to_string());
                        }
                    }
                }
            }
        }
    }
    found
}

/// The request's path and query, exactly as the client signed them.
pub fn resource(req: &ApiRequest) -> String {
    resource_at(req, &req.path)
}

fn resource_at(req: &ApiRequest, path: &str) -> String {
    match &req.query {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    }
}

/// How a request is signed: `hawk` (an `Authorization` header) or `bewit` (a signed URL);
/// `None`: not at all.
pub fn scheme(req: &ApiRequest) -> Option<&'static str> {
    if req.headers.contains_key("authorization") {
        Some("hawk")
    } else if req
        .query
        .as_deref()
        .is_some_and(|q| q.split('&').any(|p| p.starts_with("bewit=")))
    {
        Some("bewit")
    } else {
        None
    }
}

/// Who checks a request's signature.
pub enum Authority<'a> {
    /// This deployment's own clients and roles.
    Own(&'a AuthService),
    /// An existing deployment's auth service, counting its cache's hits in the metrics.
    Remote(&'a RemoteAuth, &'a Metrics),
}

impl Authority<'_> {
    async fn authenticate(
        &self,
        facts: &RequestFacts<'_>,
        now: Ts,
        realm: &Realm,
    ) -> Result<Outcome, ApiError> {
        match self {
            Authority::Own(svc) => svc.authenticate(facts, now, realm).await,
            Authority::Remote(remote, metrics) => {
                let (outcome, lookup) = remote.authenticate(facts, now).await?;
                let label = match lookup {
                    Lookup::Hit => "hit",
                    Lookup::Miss => "miss",
                };
                metrics.add(&crate::metrics::AUTH_DELEGATED, &[label], 1.0);
                Ok(outcome)
            }
        }
    }
}

/// Authenticates a request: `401 AuthenticationFailed` for a bad signature.
pub async fn authenticate(
    svc: Authority<'_>,
    req: &ApiRequest,
    now: Ts,
    realm: &Realm,
) -> Result<Caller, ApiError> {
    let (host, port) = host_and_port(req);
    let authorization = header(req, "authorization");
    if req.headers.get("authorization").is_some() && authorization.is_none() {
        return Err(auth_failed("Authorization header is not valid ASCII"));
    }
    let mut first_failure = None;
    for path in std::iter::once(&req.path).chain(&req.also_signed) {
        let resource = resource_at(req, path);
        let facts = RequestFacts {
            method: req.method.as_str(),
            resource: &resource,
            host: &host,
            port,
            authorization,
            payload: Some((header(req, "content-type").unwrap_or_default(), &req.body)),
        };
        match svc.authenticate(&facts, now, realm).await? {
            Outcome::Success(a) => return Ok(a.into()),
            Outcome::Failed(m) => {
                first_failure.get_or_insert(m);
            }
        }
    }
    Err(auth_failed(first_failure.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue, Method};

    fn req(headers: &[(&'static str, &str)]) -> ApiRequest {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        ApiRequest {
            method: Method::GET,
            path: "/p".into(),
            query: Some("a=1".into()),
            headers: h,
            body: Default::default(),
            also_signed: vec![],
            request_id: String::new(),
        }
    }

    #[test]
    fn host_and_port_follow_the_proxy_headers() {
        assert_eq!(
            host_and_port(&req(&[("host", "127.0.0.1:8080")])),
            ("127.0.0.1".into(), 8080)
        );
        assert_eq!(
            host_and_port(&req(&[("host", "Q.example.com")])),
            ("q.example.com".into(), 80)
        );
        assert_eq!(
            host_and_port(&req(&[
                ("host", "q.example.com"),
                ("x-forwarded-proto", "https")
            ])),
            ("q.example.com".into(), 443)
        );
        assert_eq!(
            host_and_port(&req(&[("host", "q:80"), ("x-forwarded-port", "443")])),
            ("q".into(), 443)
        );
        assert_eq!(
            host_and_port(&req(&[("host", "[::1]:9")])),
            ("[::1]".into(), 9)
        );
        assert_eq!(host_and_port(&req(&[])), ("".into(), 80));
        let fwd = |v: &str| forwarded_host(&req(&[("forwarded", v)]).headers);
        assert_eq!(
            fwd("by=10.0.0.1;for=1.2.3.4;host=q.example.com;proto=https").as_deref(),
            Some("q.example.com")
        );
        assert_eq!(
            fwd("host=spoofed, for=1.2.3.4;host=\"q.example.com:443\"").as_deref(),
            Some("q.example.com:443"),
            "the proxy's element, last, wins"
        );
        assert_eq!(fwd("for=1.2.3.4"), None);
        let both = req(&[
            ("forwarded", "host=other.example.com"),
            (GATEWAY_HOST_HEADER, "q.example.com"),
        ]);
        assert_eq!(
            gateway_host(&both.headers).as_deref(),
            Some("q.example.com")
        );
        let fwd_only = req(&[("forwarded", "host=q.example.com")]);
        assert_eq!(
            gateway_host(&fwd_only.headers).as_deref(),
            Some("q.example.com")
        );
        assert_eq!(forwarded_host(&req(&[]).headers), None);
        assert_eq!(resource(&req(&[])), "/p?a=1");
    }
}
