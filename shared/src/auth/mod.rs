//! Authentication and the auth service's state: Hawk signatures ([`hawk`]), temporary
//! credentials ([`cert`]), roles ([`roles`]), and clients and roles kept in the store
//! ([`AuthService`]).
//!
//! A request is authenticated in this order (upstream's, see the fact sheet §4):
//! 1. no credentials → the `anonymous` role;
//! 2. `Authorization` header or `bewit` (never both) → the client, or for temporary
//!    credentials the certificate's issuer, whose accessToken keys the MAC;
//! 3. the MAC, the timestamp (±15 min) and the payload hash when one was sent;
//! 4. the certificate (version, seed, start/expiry ±5 min, ≤ 31 days, signature, named
//!    credentials need `auth:create-client:<name>`, scopes ⊆ issuer's);
//! 5. `authorizedScopes` narrow the scopes to exactly that list, if the caller holds it;
//! 6. `assume:anonymous` is added and every role expanded.
//!
//! Secrets (accessTokens, MACs, signatures) never appear in errors or logs.

pub mod cert;
pub mod hawk;
pub mod remote;
pub mod roles;

use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::ids::new_slugid;
use crate::page::{decode_token, page_by_key, PageReq};
use crate::records::auth as keys;
use crate::scopes::ScopeExpr;
use crate::store::{Cond, Item, SkRange, Store, WriteOp};
use crate::time::Ts;
use crate::tokens::RotatingToken;
use roles::Role;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The root client's clientId.
pub const ROOT_CLIENT_ID: &str = "static/taskcluster/root";
/// The role every caller assumes.
pub const ANONYMOUS_ROLE: &str = "anonymous";
/// What the `anonymous` role grants until a role of that name is stored: reading, as common
/// deployments allow unsigned callers (a worker that checks its inputs reads its
/// dependencies' definitions unsigned). The scheduler's reads need no scope.
pub const DEFAULT_ANONYMOUS_SCOPES: &[&str] = &[
    "queue:get-task:*",
    "queue:status:*",
    "queue:list-*",
    "queue:get-artifact:public/*",
];
/// The fixed client of `testAuthenticate` and `testAuthenticateGet`.
pub const TEST_CLIENT_ID: &str = "tester";
/// Its accessToken (public by design).
pub const TEST_ACCESS_TOKEN: &str = "no-secret";
/// The tester's scopes for `testAuthenticateGet`.
pub const TEST_GET_SCOPES: &[&str] = &["test:*", "auth:create-client:test:*"];
/// How long other processes' role changes may take to be seen (this process sees its own
/// at once): as deployed every function is a process of its own, and a grant or a revocation
/// must be in force everywhere within 2 s. Each busy process re-reads the roles at most once
/// a second: with a few hundred small roles, 1–2 read units a second per warm container.
/// Clients are read on every request, so their changes (and revocations) apply at once.
pub const ROLE_CACHE_TTL: Duration = Duration::from_secs(1);

/// A client as authentication needs it.
#[derive(Clone)]
pub struct ClientRecord {
    /// The clientId.
    pub client_id: String,
    /// Its secret (never logged: `Debug` leaves it out).
    pub access_token: String,
    /// Its own scopes, before role expansion.
    pub scopes: Vec<String>,
    /// When it stops working (`None`: never, for static clients).
    pub expires: Option<Ts>,
    /// Disabled clients cannot authenticate.
    pub disabled: bool,
}

impl std::fmt::Debug for ClientRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientRecord")
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("expires", &self.expires)
            .field("disabled", &self.disabled)
            .finish_non_exhaustive()
    }
}

impl ClientRecord {
    /// A static client (configured, not stored) that never expires.
    pub fn static_client(client_id: &str, access_token: &str, scopes: &[&str]) -> Self {
        ClientRecord {
            client_id: client_id.into(),
            access_token: access_token.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            expires: None,
            disabled: false,
        }
    }
}

/// The parts of a request that a signature covers, as a server sees them.
#[derive(Debug, Clone)]
pub struct RequestFacts<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// Path and query as sent.
    pub resource: &'a str,
    /// Host (without port).
    pub host: &'a str,
    /// Port.
    pub port: u16,
    /// The `Authorization` header, if any.
    pub authorization: Option<&'a str>,
    /// Content type and raw body, for the payload hash (`None`: not checked, as for
    /// `authenticateHawk`, which never sees the body).
    pub payload: Option<(&'a str, &'a [u8])>,
}

/// A successful authentication.
#[derive(Debug, Clone, PartialEq)]
pub struct Authenticated {
    /// The clientId, or `None` for an unauthenticated request.
    pub client_id: Option<String>,
    /// Every scope held, expanded and normalised.
    pub scopes: Vec<String>,
    /// The scopes as given, before expansion: `authorizedScopes`, else the certificate's,
    /// else the client's (empty without credentials).
    pub given: Vec<String>,
    /// When the credentials stop working.
    pub expires: Option<Ts>,
    /// The payload hash the client signed, if any.
    pub hash: Option<String>,
}

/// The result of authenticating: success, or a refusal with a message safe to show.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Authenticated (possibly as anonymous).
    Success(Authenticated),
    /// Refused: `401 AuthenticationFailed`.
    Failed(String),
}

/// Which clients and roles an authentication sees.
#[derive(Debug, Clone)]
pub enum Realm {
    /// The deployment's clients and roles.
    Deployment,
    /// Only the test client with these scopes and no roles (`testAuthenticate*`).
    Tester(Vec<String>),
}

/// The parsed `ext` of a signature.
struct Ext {
    certificate: Option<cert::Certificate>,
    authorized_scopes: Option<Vec<String>>,
}

fn parse_ext(ext: Option<&str>) -> Result<Ext, String> {
    let Some(ext) = ext else {
        return Ok(Ext {
            certificate: None,
            authorized_scopes: None,
        });
    };
    let bytes = hawk::decode_any_base64(ext).ok_or("ext is not valid base64")?;
    let v: Value = crate::json::from_bytes(&bytes).map_err(|_| "ext is not valid JSON")?;
    let o = v.as_object().ok_or("ext must be a JSON object")?;
    let certificate = match o.get("certificate") {
        None | Some(Value::Null) => None,
        Some(c) => Some(cert::parse(c).map_err(|e| format!("ext.certificate: {e}"))?),
    };
    let authorized_scopes = match o.get("authorizedScopes") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => {
            let scopes = a
                .iter()
                .map(|s| s.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or("ext.authorizedScopes must be a list of strings")?;
            if !scopes.iter().all(|s| crate::scopes::is_valid_scope(s)) {
                return Err("ext.authorizedScopes must be valid scopes (printable ASCII)".into());
            }
            Some(scopes)
        }
        Some(_) => return Err("ext.authorizedScopes must be a list of strings".into()),
    };
    Ok(Ext {
        certificate,
        authorized_scopes,
    })
}

/// The signature on a request.
enum Signature {
    Header(hawk::Header),
    Bewit(hawk::Bewit, String),
}

impl Signature {
    fn id(&self) -> &str {
        match self {
            Signature::Header(h) => &h.id,
            Signature::Bewit(b, _) => &b.id,
        }
    }
    fn ext(&self) -> Option<&str> {
        match self {
            Signature::Header(h) => h.ext.as_deref(),
            Signature::Bewit(b, _) => b.ext.as_deref(),
        }
    }
}

fn min_expiry(a: Option<Ts>, b: Option<Ts>) -> Option<Ts> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if x.0 <= y.0 { x } else { y }),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Clients and roles over the store, plus the static clients from configuration.
pub struct AuthService {
    store: Arc<dyn Store>,
    statics: Vec<ClientRecord>,
    /// Static clients whose tokens are read again when rotated, by clientId.
    rotating: HashMap<String, Arc<RotatingToken>>,
    anonymous_default: Vec<String>,
    roles_cache: Mutex<Option<(Instant, Arc<Vec<Role>>)>>,
}

impl AuthService {
    /// A service over `store` with the given static clients (root, the queue's own) and the
    /// scopes of `anonymous` until a role of that name is stored.
    pub fn new(
        store: Arc<dyn Store>,
        statics: Vec<ClientRecord>,
        anonymous_default: Vec<String>,
    ) -> Self {
        AuthService {
            store,
            statics,
            rotating: HashMap::new(),
            anonymous_default,
            roles_cache: Mutex::new(None),
        }
    }

    /// The same service taking static client `client_id`'s token from `token`, which an
    /// operator may rotate ([`crate::tokens`]).
    pub fn with_rotating(mut self, client_id: &str, token: Arc<RotatingToken>) -> Self {
        self.rotating.insert(client_id.to_string(), token);
        self
    }

    fn static_client(&self, client_id: &str) -> Option<&ClientRecord> {
        self.statics.iter().find(|c| c.client_id == client_id)
    }

    /// True if `client_id` is a static client (configured, not manageable through the API).
    pub fn is_static(&self, client_id: &str) -> bool {
        self.static_client(client_id).is_some() || client_id.starts_with("static/")
    }

    async fn load_client(&self, client_id: &str) -> ApiResult<Option<(Value, u64)>> {
        let (pk, sk) = keys::client_key(client_id);
        Ok(self
            .store
            .get(keys::AUTH, pk, &sk)
            .await?
            .map(|i| (i.data.into_value(), i.version)))
    }

    /// A client for authentication: static ones first, then stored ones.
    pub async fn client(&self, client_id: &str) -> ApiResult<Option<ClientRecord>> {
        if let Some(c) = self.static_client(client_id) {
            return Ok(Some(c.clone()));
        }
        Ok(self
            .load_client(client_id)
            .await?
            .map(|(d, _)| ClientRecord {
                client_id: client_id.to_string(),
                access_token: d["accessToken"].as_str().unwrap_or_default().to_string(),
                scopes: crate::json::string_list(&d["scopes"]),
                expires: d["expires"].as_str().and_then(Ts::parse),
                disabled: d["disabled"].as_bool().unwrap_or(false),
            }))
    }

    /// Every role (cached for [`ROLE_CACHE_TTL`]), with the default `anonymous` role when
    /// none is stored.
    pub async fn roles(&self) -> ApiResult<Arc<Vec<Role>>> {
        if let Ok(guard) = self.roles_cache.lock() {
            if let Some((at, roles)) = guard.as_ref() {
                if at.elapsed() < ROLE_CACHE_TTL {
                    return Ok(roles.clone());
                }
            }
        }
        let mut roles: Vec<Role> = self
            .stored_roles()
            .await?
            .into_iter()
            .map(|d| Role {
                role_id: d["roleId"].as_str().unwrap_or_default().to_string(),
                scopes: crate::json::string_list(&d["scopes"]),
            })
            .collect();
        if !roles.iter().any(|r| r.role_id == ANONYMOUS_ROLE) {
            roles.push(Role {
                role_id: ANONYMOUS_ROLE.into(),
                scopes: self.anonymous_default.clone(),
            });
        }
        let roles = Arc::new(roles);
        if let Ok(mut guard) = self.roles_cache.lock() {
            *guard = Some((Instant::now(), roles.clone()));
        }
        Ok(roles)
    }

    async fn stored_roles(&self) -> ApiResult<Vec<Value>> {
        let mut out = vec![];
        let mut after = None;
        loop {
            let page = self
                .store
                .query(
                    keys::AUTH,
                    keys::PK_ROLES,
                    &SkRange::default(),
                    after.as_ref(),
                    1000,
                )
                .await?;
            out.extend(page.items.into_iter().map(|i| i.data.into_value()));
            match page.next {
                Some(c) => after = Some(c),
                None => return Ok(out),
            }
        }
    }

    fn forget_roles(&self) {
        if let Ok(mut guard) = self.roles_cache.lock() {
            *guard = None;
        }
    }

    /// `scopes` with every role expanded, normalised.
    pub async fn expand(&self, scopes: &[String]) -> ApiResult<Vec<String>> {
        // `*` needs no roles (the root client's every request).
        if scopes.iter().any(|s| s == "*") {
            return Ok(vec!["*".into()]);
        }
        let roles = self.roles().await?;
        Ok(roles::expand(scopes, &roles).unwrap_or_else(|partial| partial))
    }

    /// Authenticates a request at `now`.
    pub async fn authenticate(
        &self,
        req: &RequestFacts<'_>,
        now: Ts,
        realm: &Realm,
    ) -> ApiResult<Outcome> {
        let (without_bewit, bewit) = hawk::strip_bewit(req.resource);
        let sig = match (req.authorization, bewit) {
            (Some(_), Some(_)) => {
                return Ok(Outcome::Failed(
                    "Cannot use both an Authorization header and a bewit".into(),
                ))
            }
            (None, None) => {
                let scopes = self
                    .expand_in(realm, &[format!("assume:{ANONYMOUS_ROLE}")])
                    .await?;
                return Ok(Outcome::Success(Authenticated {
                    client_id: None,
                    scopes,
                    given: vec![],
                    expires: None,
                    hash: None,
                }));
            }
            (Some(h), None) => match hawk::parse_header(h) {
                Ok(h) => Signature::Header(h),
                Err(e) => return Ok(Outcome::Failed(e.0)),
            },
            (None, Some(b)) => {
                if !req.method.eq_ignore_ascii_case("GET")
                    && !req.method.eq_ignore_ascii_case("HEAD")
                {
                    return Ok(Outcome::Failed("A bewit is only valid for GET".into()));
                }
                match hawk::parse_bewit(&b) {
                    Ok(b) => Signature::Bewit(b, without_bewit),
                    Err(e) => return Ok(Outcome::Failed(e.0)),
                }
            }
        };
        match self.verify(req, &sig, now, realm).await? {
            Ok(a) => Ok(Outcome::Success(a)),
            Err(m) => Ok(Outcome::Failed(m)),
        }
    }

    async fn expand_in(&self, realm: &Realm, scopes: &[String]) -> ApiResult<Vec<String>> {
        match realm {
            Realm::Deployment => self.expand(scopes).await,
            Realm::Tester(_) => Ok(roles::normalize(scopes.to_vec())),
        }
    }

    async fn lookup(
        &self,
        realm: &Realm,
        client_id: &str,
        now: Ts,
    ) -> ApiResult<Result<ClientRecord, String>> {
        let found = match realm {
            Realm::Tester(scopes) => (client_id == TEST_CLIENT_ID).then(|| ClientRecord {
                client_id: TEST_CLIENT_ID.into(),
                access_token: TEST_ACCESS_TOKEN.into(),
                scopes: scopes.clone(),
                expires: None,
                disabled: false,
            }),
            Realm::Deployment => {
                match (self.client(client_id).await?, self.rotating.get(client_id)) {
                    (Some(mut c), Some(token)) => {
                        c.access_token = token.current(now).await;
                        Some(c)
                    }
                    (c, _) => c,
                }
            }
        };
        Ok(match found {
            // A stored client without a secret would accept MACs made with an empty key.
            None => Err(format!("Unknown clientId {client_id}")),
            Some(c) if c.access_token.is_empty() => Err(format!("Unknown clientId {client_id}")),
            Some(c) if c.disabled => Err(format!("Client {client_id} is disabled")),
            Some(c) if c.expires.is_some_and(|e| e.0 < now.0) => {
                Err(format!("Client {client_id} has expired"))
            }
            Some(c) => Ok(c),
        })
    }

    async fn verify(
        &self,
        req: &RequestFacts<'_>,
        sig: &Signature,
        now: Ts,
        realm: &Realm,
    ) -> ApiResult<Result<Authenticated, String>> {
        let ext = match parse_ext(sig.ext()) {
            Ok(e) => e,
            Err(m) => return Ok(Err(m)),
        };
        let id = sig.id();
        let issuer_id = ext.certificate.as_ref().map_or(id, |c| c.issuer_of(id));
        let mut client = match self.lookup(realm, issuer_id, now).await? {
            Ok(c) => c,
            Err(m) => return Ok(Err(m)),
        };
        let signed = hawk::SignedRequest {
            method: req.method,
            resource: req.resource,
            host: req.host,
            port: req.port,
        };
        let now_secs = now.millis().div_euclid(1000);
        let check = |token: &str| {
            let key = match &ext.certificate {
                Some(c) => cert::temp_access_token(token, &c.seed),
                None => token.to_string(),
            };
            match sig {
                Signature::Header(h) => {
                    hawk::verify_header(h, &signed, &key, now_secs, req.payload)
                }
                Signature::Bewit(b, stripped) => {
                    hawk::verify_bewit(b, &signed, stripped, &key, now_secs)
                }
            }
        };
        if let Err(e) = check(&client.access_token) {
            // A static token may have been rotated since this process read it, or signed
            // the certificate before a rotation.
            let rotating = match realm {
                Realm::Deployment => self.rotating.get(issuer_id),
                Realm::Tester(_) => None,
            };
            let tried = match rotating {
                Some(t) => {
                    t.after_mismatch(&client.access_token, now, ext.certificate.is_some())
                        .await
                }
                None => vec![],
            };
            match tried.into_iter().find(|t| check(t).is_ok()) {
                Some(token) => client.access_token = token,
                None => return Ok(Err(e.0)),
            }
        }
        let (mut scopes, mut expires) = (client.scopes.clone(), client.expires);
        if let Some(c) = &ext.certificate {
            let issuer_scopes = self.expand_in(realm, &client.scopes).await?;
            match c.validate(id, &client.access_token, &issuer_scopes, now) {
                Ok(s) => scopes = s,
                Err(m) => return Ok(Err(format!("ext.certificate: {m}"))),
            }
            expires = min_expiry(expires, Some(Ts(c.expiry)));
        }
        let anonymous = format!("assume:{ANONYMOUS_ROLE}");
        if let Some(authorized) = ext.authorized_scopes {
            let mut held = scopes.clone();
            held.push(anonymous.clone());
            let held = self.expand_in(realm, &held).await?;
            let need = ScopeExpr::AllOf(
                authorized
                    .iter()
                    .map(|s| ScopeExpr::scope(s.as_str()))
                    .collect(),
            );
            if !need.satisfied_by(&held) {
                return Ok(Err("ext.authorizedScopes oversteps your scopes".to_string()));
            }
            scopes = authorized;
        }
        let given = scopes.clone();
        scopes.push(anonymous);
        Ok(Ok(Authenticated {
            client_id: Some(id.to_string()),
            scopes: self.expand_in(realm, &scopes).await?,
            given,
            expires,
            hash: match sig {
                Signature::Header(h) => h.hash.clone(),
                Signature::Bewit(..) => None,
            },
        }))
    }

    // ---- management (the auth API) ----

    fn client_json(&self, d: &Value, expanded: Vec<String>) -> Value {
        let mut v = json!({
            "clientId": d["clientId"],
            "description": d["description"],
            "expires": d["expires"],
            "created": d["created"],
            "lastModified": d["lastModified"],
            "lastDateUsed": d["lastDateUsed"],
            "lastRotated": d["lastRotated"],
            "deleteOnExpiration": d["deleteOnExpiration"].as_bool().unwrap_or(false),
            "disabled": d["disabled"].as_bool().unwrap_or(false),
            "scopes": d["scopes"],
            "expandedScopes": expanded,
        });
        if let Some(o) = v.as_object_mut() {
            o.retain(|_, x| !x.is_null());
        }
        v
    }

    fn static_json(&self, c: &ClientRecord, expanded: Vec<String>) -> Value {
        // Static clients have no stored history; report a stable, far-future record.
        let epoch = Ts(0).to_string();
        json!({
            "clientId": c.client_id,
            "description": "Static client, configured by the deployment",
            "expires": Ts(32_503_680_000_000).to_string(),
            "created": epoch, "lastModified": epoch, "lastDateUsed": epoch, "lastRotated": epoch,
            "deleteOnExpiration": false,
            "disabled": false,
            "scopes": c.scopes,
            "expandedScopes": expanded,
        })
    }

    /// `client`: one client's public record.
    pub async fn get_client(&self, client_id: &str) -> ApiResult<Value> {
        if let Some(c) = self.static_client(client_id) {
            let expanded = self.expand(&c.scopes).await?;
            return Ok(self.static_json(c, expanded));
        }
        let (d, _) = self
            .load_client(client_id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("Client {client_id} not found")))?;
        let expanded = self.expand(&crate::json::string_list(&d["scopes"])).await?;
        Ok(self.client_json(&d, expanded))
    }

    /// `listClients`: clients whose clientId starts with `prefix`, a page at a time, ordered
    /// by clientId; static clients are paged with the stored ones, as upstream pages all
    /// clients alike.
    pub async fn list_clients(&self, prefix: Option<&str>, page: &PageReq) -> ApiResult<Value> {
        if let Some(p) = prefix {
            crate::ids::check_key_part("prefix", p)?;
        }
        let after = page.token.as_deref().map(decode_token).transpose()?;
        let after_id = after.as_ref().map(|c| c.0.clone());
        let range = SkRange {
            prefix: prefix.filter(|p| !p.is_empty()).map(String::from),
            upto: None,
        };
        let res = self
            .store
            .query(
                keys::AUTH,
                keys::PK_CLIENTS,
                &range,
                after.as_ref(),
                page.limit,
            )
            .await?;
        let roles = self.roles().await?;
        // The first `limit` stored clients after the cursor and every static one after it:
        // the first `limit` of both together are the page (any stored client not read sorts
        // after every one that was).
        let mut page_items: Vec<(String, Value)> = self
            .statics
            .iter()
            .filter(|c| prefix.is_none_or(|p| c.client_id.starts_with(p)))
            .filter(|c| {
                after_id
                    .as_ref()
                    .is_none_or(|a| c.client_id.as_str() > a.as_str())
            })
            .map(|c| {
                let e = roles::expand(&c.scopes, &roles).unwrap_or_else(|p| p);
                (c.client_id.clone(), self.static_json(c, e))
            })
            .collect();
        for i in &res.items {
            let e = roles::expand(&crate::json::string_list(&i.data["scopes"]), &roles)
                .unwrap_or_else(|p| p);
            page_items.push((i.sk.clone(), self.client_json(&i.data, e)));
        }
        let (clients, token) =
            page_by_key(page_items, page.limit, res.next.is_some(), keys::PK_CLIENTS);
        let mut v = json!({ "clients": clients });
        if let Some(t) = token {
            v["continuationToken"] = json!(t);
        }
        Ok(v)
    }

    fn static_refusal(&self, client_id: &str) -> ApiResult<()> {
        if self.is_static(client_id) {
            return Err(ApiError::input(format!(
                "{client_id} is a static client; static clients are managed by configuration"
            )));
        }
        Ok(())
    }

    /// `createClient`: stores a new client and returns it with its accessToken.
    pub async fn create_client(&self, client_id: &str, body: &Value, now: Ts) -> ApiResult<Value> {
        self.static_refusal(client_id)?;
        no_double_star(body)?;
        let expires = body["expires"]
            .as_str()
            .and_then(Ts::parse)
            .ok_or_else(|| ApiError::input("expires must be a date-time"))?;
        let token = new_access_token();
        let scopes = roles::normalize(crate::json::string_list(&body["scopes"]));
        let d = json!({
            "clientId": client_id,
            "accessToken": token,
            "description": body["description"].as_str().unwrap_or_default(),
            "scopes": scopes,
            "expires": expires,
            "created": now, "lastModified": now, "lastDateUsed": now, "lastRotated": now,
            "deleteOnExpiration": body["deleteOnExpiration"].as_bool().unwrap_or(false),
            "disabled": false,
        });
        let (pk, sk) = keys::client_key(client_id);
        let write = self
            .store
            .write(WriteOp::Put {
                table: keys::AUTH,
                item: Item::new(pk, sk, d.clone(), vec![]),
                cond: Cond::NotExists,
            })
            .await;
        match write {
            Ok(_) => {}
            Err(e) if e.is_condition_failed() => {
                // The accessToken is only ever shown once, so a repeat cannot be answered.
                return Err(ApiError::conflict(format!(
                    "Client {client_id} already exists"
                )));
            }
            Err(e) => return Err(e.into()),
        }
        let expanded = self.expand(&crate::json::string_list(&d["scopes"])).await?;
        let mut v = self.client_json(&d, expanded);
        v["accessToken"] = json!(token);
        Ok(v)
    }

    /// Read-modify-write of a stored client, retried on a concurrent change: `f` changes
    /// the stored client, or refuses.
    async fn update_client(
        &self,
        client_id: &str,
        mut f: impl FnMut(&mut Value) -> ApiResult<()>,
    ) -> ApiResult<Value> {
        self.static_refusal(client_id)?;
        for _ in 0..5 {
            let (mut d, version) = self
                .load_client(client_id)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("Client {client_id} not found")))?;
            f(&mut d)?;
            let (pk, sk) = keys::client_key(client_id);
            match self
                .store
                .write(WriteOp::Put {
                    table: keys::AUTH,
                    item: Item::new(pk, sk, d.clone(), vec![]),
                    cond: Cond::Version(version),
                })
                .await
            {
                Ok(_) => return Ok(d),
                Err(e) if e.is_condition_failed() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "Client {client_id} is being modified concurrently; retry"
        )))
    }

    /// `updateClient`: replaces a stored client's description, expiry, deleteOnExpiration and
    /// (when given) scopes. `authorize` gets the scopes the update adds, those not among the
    /// client's stored scopes word for word (as upstream compares them), and refuses when the
    /// caller may not grant them; it is asked again if the client changed meanwhile.
    pub async fn update_client_from(
        &self,
        client_id: &str,
        body: &Value,
        now: Ts,
        mut authorize: impl FnMut(Vec<String>) -> ApiResult<()>,
    ) -> ApiResult<Value> {
        no_double_star(body)?;
        let expires = body["expires"]
            .as_str()
            .and_then(Ts::parse)
            .ok_or_else(|| ApiError::input("expires must be a date-time"))?;
        let scopes = body
            .get("scopes")
            .map(|s| roles::normalize(crate::json::string_list(s)));
        let asked = crate::json::string_list(&body["scopes"]);
        let d = self
            .update_client(client_id, |d| {
                let stored = crate::json::string_list(&d["scopes"]);
                authorize(
                    asked
                        .iter()
                        .filter(|s| !stored.contains(s))
                        .cloned()
                        .collect(),
                )?;
                d["description"] = json!(body["description"].as_str().unwrap_or_default());
                d["expires"] = json!(expires);
                d["deleteOnExpiration"] =
                    json!(body["deleteOnExpiration"].as_bool().unwrap_or(false));
                if let Some(s) = &scopes {
                    d["scopes"] = json!(s);
                }
                d["lastModified"] = json!(now);
                Ok(())
            })
            .await?;
        let expanded = self.expand(&crate::json::string_list(&d["scopes"])).await?;
        Ok(self.client_json(&d, expanded))
    }

    /// `resetAccessToken`: a new accessToken; the old one stops working at once.
    pub async fn reset_access_token(&self, client_id: &str, now: Ts) -> ApiResult<Value> {
        let token = new_access_token();
        let d = self
            .update_client(client_id, |d| {
                d["accessToken"] = json!(token);
                d["lastRotated"] = json!(now);
                d["lastModified"] = json!(now);
                Ok(())
            })
            .await?;
        let expanded = self.expand(&crate::json::string_list(&d["scopes"])).await?;
        let mut v = self.client_json(&d, expanded);
        v["accessToken"] = json!(token);
        Ok(v)
    }

    /// `enableClient` / `disableClient`.
    pub async fn set_disabled(&self, client_id: &str, disabled: bool, now: Ts) -> ApiResult<Value> {
        let d = self
            .update_client(client_id, |d| {
                if d["disabled"].as_bool() != Some(disabled) {
                    d["disabled"] = json!(disabled);
                    d["lastModified"] = json!(now);
                }
                Ok(())
            })
            .await?;
        let expanded = self.expand(&crate::json::string_list(&d["scopes"])).await?;
        Ok(self.client_json(&d, expanded))
    }

    /// `deleteClient`: succeeds whether or not the client exists.
    pub async fn delete_client(&self, client_id: &str) -> ApiResult<()> {
        self.static_refusal(client_id)?;
        let (pk, sk) = keys::client_key(client_id);
        self.store
            .write(WriteOp::Delete {
                table: keys::AUTH,
                pk: pk.into(),
                sk,
                cond: Cond::None,
            })
            .await?;
        Ok(())
    }

    fn role_json(&self, d: &Value, expanded: Vec<String>) -> Value {
        json!({
            "roleId": d["roleId"],
            "description": d["description"],
            "scopes": d["scopes"],
            "created": d["created"],
            "lastModified": d["lastModified"],
            "expandedScopes": expanded,
        })
    }

    /// `role`: one stored role and what it expands to.
    pub async fn get_role(&self, role_id: &str) -> ApiResult<Value> {
        let (pk, sk) = keys::role_key(role_id);
        let d = self
            .store
            .get(keys::AUTH, pk, &sk)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("Role {role_id} not found")))?
            .data;
        let expanded = self.expand(&[format!("assume:{role_id}")]).await?;
        Ok(self.role_json(&d, expanded))
    }

    /// `listRoles`: every stored role.
    pub async fn list_roles(&self) -> ApiResult<Value> {
        let stored = self.stored_roles().await?;
        let roles = self.roles().await?;
        Ok(Value::Array(
            stored
                .iter()
                .map(|d| {
                    let id = d["roleId"].as_str().unwrap_or_default();
                    let e = roles::expand(&[format!("assume:{id}")], &roles).unwrap_or_else(|p| p);
                    self.role_json(d, e)
                })
                .collect(),
        ))
    }

    /// `listRoles2` and `listRoleIds`: a page of roles ordered by roleId (as `listRoles`
    /// gives them), with the token of the next page if any.
    pub async fn list_roles_page(&self, page: &PageReq) -> ApiResult<(Vec<Value>, Option<String>)> {
        let after = page.token.as_deref().map(decode_token).transpose()?;
        let after_id = after.map(|c| c.0);
        let Value::Array(all) = self.list_roles().await? else {
            return Ok((vec![], None));
        };
        let rest: Vec<(String, Value)> = all
            .into_iter()
            .filter_map(|r| Some((r["roleId"].as_str()?.to_string(), r)))
            .filter(|(id, _)| after_id.as_deref().is_none_or(|a| id.as_str() > a))
            .collect();
        Ok(page_by_key(rest, page.limit, false, keys::PK_ROLES))
    }

    /// Every role as stored (through the roles' cache), with `role_id` holding `scopes`.
    async fn roles_with(&self, role_id: &str, scopes: Vec<String>) -> ApiResult<Vec<Role>> {
        let mut roles: Vec<Role> = self
            .roles()
            .await?
            .iter()
            .filter(|r| r.role_id != role_id)
            .cloned()
            .collect();
        roles.push(Role {
            role_id: role_id.into(),
            scopes,
        });
        Ok(roles)
    }

    /// What `assume:<role_id>` expands to among `roles`; `400 InputError` if that expansion
    /// would not converge.
    fn converging(role_id: &str, roles: &[Role]) -> ApiResult<Vec<String>> {
        let endless = || ApiError::input(format!("Role {role_id} would expand without end"));
        // A starred role is also tried with an empty parameter: `<..>` feeding the role back
        // into itself only shows there.
        let bare = format!("assume:{}", role_id.trim_end_matches('*'));
        roles::expand(&[bare], roles).map_err(|_| endless())?;
        roles::expand(&[format!("assume:{role_id}")], roles).map_err(|_| endless())
    }

    /// `createRole`: refuses roles whose expansion would not converge.
    pub async fn create_role(&self, role_id: &str, body: &Value, now: Ts) -> ApiResult<Value> {
        no_double_star(body)?;
        let scopes = roles::normalize(crate::json::string_list(&body["scopes"]));
        let expanded = Self::converging(role_id, &self.roles_with(role_id, scopes.clone()).await?)?;
        let d = json!({
            "roleId": role_id,
            "description": body["description"].as_str().unwrap_or_default(),
            "scopes": scopes,
            "created": now,
            "lastModified": now,
        });
        let (pk, sk) = keys::role_key(role_id);
        match self
            .store
            .write(WriteOp::Put {
                table: keys::AUTH,
                item: Item::new(pk, sk, d.clone(), vec![]),
                cond: Cond::NotExists,
            })
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_condition_failed() => {
                return Err(ApiError::conflict(format!("Role {role_id} already exists")))
            }
            Err(e) => return Err(e.into()),
        }
        self.forget_roles();
        Ok(self.role_json(&d, expanded))
    }

    /// `updateRole`: replaces a stored role's scopes and description, refusing an expansion
    /// that would not converge. `authorize` gets the scopes the update adds, those the role's
    /// present expansion does not already satisfy (as upstream), and refuses when the caller
    /// may not grant them; it is asked again if the role changed meanwhile.
    pub async fn update_role_from(
        &self,
        role_id: &str,
        body: &Value,
        now: Ts,
        mut authorize: impl FnMut(Vec<String>) -> ApiResult<()>,
    ) -> ApiResult<Value> {
        no_double_star(body)?;
        let asked = crate::json::string_list(&body["scopes"]);
        let scopes = roles::normalize(asked.clone());
        let (pk, sk) = keys::role_key(role_id);
        for _ in 0..5 {
            let item = self
                .store
                .get(keys::AUTH, pk, &sk)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("Role {role_id} not found")))?;
            // The role as just read, not as the roles' cache holds it.
            let stored = crate::json::string_list(&item.data["scopes"]);
            let mut roles = self.roles_with(role_id, stored).await?;
            let former = roles::expand(&[format!("assume:{role_id}")], &roles)
                .unwrap_or_else(|partial| partial);
            authorize(
                asked
                    .iter()
                    .filter(|s| !ScopeExpr::scope(s.as_str()).satisfied_by(&former))
                    .cloned()
                    .collect(),
            )?;
            if let Some(r) = roles.last_mut() {
                r.scopes = scopes.clone();
            }
            let expanded = Self::converging(role_id, &roles)?;
            let mut d = item.data;
            d["scopes"] = json!(scopes);
            d["description"] = json!(body["description"].as_str().unwrap_or_default());
            d["lastModified"] = json!(now);
            let put = WriteOp::Put {
                table: keys::AUTH,
                item: Item::new(pk, sk.clone(), d.clone(), vec![]),
                cond: Cond::Version(item.version),
            };
            match self.store.write(put).await {
                Ok(_) => {
                    self.forget_roles();
                    return Ok(self.role_json(&d, expanded));
                }
                Err(e) if e.is_condition_failed() => self.forget_roles(),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "Role {role_id} is being modified concurrently; retry"
        )))
    }

    /// `deleteRole`: succeeds whether or not the role exists.
    pub async fn delete_role(&self, role_id: &str) -> ApiResult<()> {
        let (pk, sk) = keys::role_key(role_id);
        self.store
            .write(WriteOp::Delete {
                table: keys::AUTH,
                pk: pk.into(),
                sk,
                cond: Cond::None,
            })
            .await?;
        self.forget_roles();
        Ok(())
    }
}

/// `400 InputError` for a granted scope that ends in `**`, as upstream refuses them (holding
/// `a**` would not grant what `a*` grants, which confuses whoever reads the client or role).
fn no_double_star(body: &Value) -> ApiResult<()> {
    match crate::json::string_list(&body["scopes"])
        .iter()
        .find(|s| s.ends_with("**"))
    {
        Some(s) => Err(ApiError::input(format!(
            "scope {s} ends in `**`: a scope may end in one `*` only"
        ))),
        None => Ok(()),
    }
}

/// A fresh accessToken: two slugids, 44 characters (upstream's shape).
pub fn new_access_token() -> String {
    format!("{}{}", new_slugid(), new_slugid())
}

/// `401 AuthenticationFailed` with `message` (the `www-authenticate` header is added when the
/// error is rendered).
pub fn auth_failed(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::AuthenticationFailed, message)
}

#[cfg(test)]
mod tests;
