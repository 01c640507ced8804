//! The whole authentication of a request (`AuthService::authenticate`): header or bewit,
//! `ext` with a certificate and `authorizedScopes`, over a real embedded store with static
//! clients and the default roles, or in the test client's realm with arbitrary scopes. The
//! harness signs what it builds with the right key (or, when told, a wrong one), so that
//! the checks after the MAC (certificate, authorizedScopes, expansion) are reached; raw
//! header values cover the parse failures.
//! Properties: nothing but a signature made with the client's key (or the key derived from
//! its certificate) succeeds; a header more than 15 minutes off, an expired bewit, a bewit on
//! a method other than GET or HEAD never succeed; a success names the signing clientId;
//! its given scopes are held by the client (a certificate or `authorizedScopes` narrow,
//! never widen); its scopes are valid scopes; with a certificate, it expires no later than
//! the certificate and no later than 31 days and 5 minutes from now.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use shared::auth::cert::{temp_access_token, CERT_SKEW_MS, MAX_LIFETIME_MS};
use shared::auth::hawk::{
    hmac_b64, payload_hash, sign_bewit, sign_header, strip_bewit, SignedRequest,
};
use shared::auth::{
    roles, AuthService, ClientRecord, Outcome, Realm, RequestFacts, TEST_ACCESS_TOKEN,
    TEST_CLIENT_ID,
};
use shared::scopes::ScopeExpr;
use shared::store::sqlite::SqliteStore;
use shared::time::Ts;
use shared_fuzz::{valid_scope, HOST, NOW_MS, NOW_S, PORT};
use std::sync::{Arc, OnceLock};

const ISSUER: &str = "fuzz/issuer";
const ISSUER_TOKEN: &str = "issuer-secret";
const ISSUER_SCOPES: &[&str] = &[
    "queue:create-task:*",
    "auth:create-client:fuzz/*",
    "assume:project:x",
    "secrets:get:a",
];

struct Fixture {
    rt: tokio::runtime::Runtime,
    svc: AuthService,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("shared-fuzz-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let store = SqliteStore::open(&dir.join("db")).expect("the embedded store");
        let svc = AuthService::new(
            Arc::new(store),
            vec![
                ClientRecord::static_client(ISSUER, ISSUER_TOKEN, ISSUER_SCOPES),
                ClientRecord::static_client("static/taskcluster/root", "root-secret", &["*"]),
            ],
            vec!["queue:get-task:*".into(), "queue:list-*".into()],
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        Fixture { rt, svc }
    })
}

#[derive(Arbitrary, Debug)]
struct Cert<'a> {
    scopes: Vec<&'a str>,
    /// Seconds from now, or (`raw`) milliseconds since the epoch.
    start: i64,
    expiry: i64,
    raw: bool,
    seed: [u8; 33],
    /// A name for named credentials (the issuer is then the static client).
    name: Option<&'a str>,
    sign_right: bool,
    as_string: bool,
}

#[derive(Arbitrary, Debug)]
enum Ext<'a> {
    None,
    Raw(&'a str),
    Json {
        certificate: Option<Cert<'a>>,
        authorized: Option<Vec<&'a str>>,
    },
}

#[derive(Arbitrary, Debug)]
enum Mode<'a> {
    Header {
        /// Seconds away from now.
        skew: i32,
        nonce: &'a str,
        hash: bool,
    },
    Bewit {
        /// Seconds from now to its expiry.
        exp: i32,
        query: Option<&'a str>,
    },
    RawHeader(&'a str),
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    /// The test client's realm with these scopes, or the deployment's.
    tester: Option<Vec<&'a str>>,
    /// Sign as the root client instead of the issuer (deployment realm).
    root: bool,
    method: u8,
    path: &'a str,
    mode: Mode<'a>,
    ext: Ext<'a>,
    right_key: bool,
    body: &'a [u8],
}

const METHODS: [&str; 4] = ["GET", "POST", "HEAD", "PUT"];

fn run(u: Unstructured) -> arbitrary::Result<()> {
    let input = Input::arbitrary_take_rest(u)?;
    let f = fixture();
    let realm = match &input.tester {
        Some(s) => Realm::Tester(s.iter().map(|s| s.to_string()).collect()),
        None => Realm::Deployment,
    };
    let (mut id, token, own_scopes): (String, &str, Vec<String>) = match &realm {
        Realm::Tester(s) => (TEST_CLIENT_ID.into(), TEST_ACCESS_TOKEN, s.clone()),
        Realm::Deployment if input.root => (
            "static/taskcluster/root".into(),
            "root-secret",
            vec!["*".into()],
        ),
        Realm::Deployment => (
            ISSUER.into(),
            ISSUER_TOKEN,
            ISSUER_SCOPES.iter().map(|s| s.to_string()).collect(),
        ),
    };
    let issuer_id = id.clone();

    // ext, and the key the MAC is made with.
    let mut key = token.to_string();
    let mut cert_expiry = None;
    let mut must_fail = !input.right_key;
    let ext = match &input.ext {
        Ext::None => None,
        Ext::Raw(s) => Some(s.to_string()),
        Ext::Json {
            certificate,
            authorized,
        } => {
            let mut o = serde_json::Map::new();
            if let Some(c) = certificate {
                let seed = base64::Engine::encode(
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                    c.seed,
                );
                let time = |v: i64| {
                    if c.raw {
                        v
                    } else {
                        NOW_MS.saturating_add(v.saturating_mul(1000))
                    }
                };
                let (start, expiry) = (time(c.start), time(c.expiry));
                let mut lines = vec!["version:1".to_string()];
                let mut cert = json!({
                    "version": 1, "scopes": c.scopes, "start": start, "expiry": expiry,
                    "seed": seed,
                });
                if let Some(name) = c.name {
                    id = name.to_string();
                    cert["issuer"] = json!(issuer_id);
                    lines.push(format!("clientId:{id}"));
                    lines.push(format!("issuer:{issuer_id}"));
                }
                lines.push(format!("seed:{seed}"));
                lines.push(format!("start:{start}"));
                lines.push(format!("expiry:{expiry}"));
                lines.push("scopes:".into());
                lines.extend(c.scopes.iter().map(|s| s.to_string()));
                let signer = if c.sign_right { token } else { "wrong" };
                must_fail |= !c.sign_right;
                cert["signature"] = json!(hmac_b64(signer, &lines.join("\n")));
                key = temp_access_token(token, &seed);
                cert_expiry = Some(expiry);
                o.insert(
                    "certificate".into(),
                    if c.as_string {
                        json!(cert.to_string())
                    } else {
                        cert
                    },
                );
            }
            if let Some(a) = authorized {
                o.insert("authorizedScopes".into(), json!(a));
            }
            Some(base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                Value::Object(o).to_string(),
            ))
        }
    };
    if !input.right_key {
        key.push('x');
    }

    let method = METHODS[usize::from(input.method) % METHODS.len()];
    let path = format!("/{}", input.path);
    let content_type = "application/json";
    let payload = Some((content_type, input.body));
    let mut resource = path.clone();
    let authorization = match &input.mode {
        Mode::Header { skew, nonce, hash } => {
            let ts = NOW_S + i64::from(*skew);
            must_fail |= i64::from(*skew).abs() > 15 * 60;
            let hash = hash.then(|| payload_hash(content_type, input.body));
            let req = SignedRequest {
                method,
                resource: &resource,
                host: HOST,
                port: PORT,
            };
            Some(sign_header(
                &id,
                &key,
                &req,
                ts,
                nonce,
                hash.as_deref(),
                ext.as_deref(),
            ))
        }
        Mode::Bewit { exp, query } => {
            if let Some(q) = query {
                resource = format!("{path}?{q}");
            }
            let exp = NOW_S + i64::from(*exp);
            must_fail |= exp < NOW_S || !(method == "GET" || method == "HEAD");
            let req = SignedRequest {
                method,
                resource: &resource,
                host: HOST,
                port: PORT,
            };
            let bewit = sign_bewit(&id, &key, &req, exp, ext.as_deref());
            let sep = if resource.contains('?') { '&' } else { '?' };
            resource = format!("{resource}{sep}bewit={bewit}");
            None
        }
        Mode::RawHeader(h) => {
            must_fail = true;
            Some(h.to_string())
        }
    };
    let facts = RequestFacts {
        method,
        resource: &resource,
        host: HOST,
        port: PORT,
        authorization: authorization.as_deref(),
        payload,
    };
    let outcome =
        f.rt.block_on(f.svc.authenticate(&facts, Ts(NOW_MS), &realm))
            .expect("the embedded store answers");
    let Outcome::Success(a) = outcome else {
        return Ok(());
    };
    if a.client_id.is_none() {
        // Only a request without credentials is anonymous.
        assert!(facts.authorization.is_none() && strip_bewit(&resource).1.is_none());
        return Ok(());
    }
    assert!(!must_fail, "{input:?} succeeded: {a:?}");
    assert_eq!(a.client_id.as_deref(), Some(id.as_str()));

    // What the signing client holds: its own scopes and the anonymous role, expanded.
    let mut held = own_scopes;
    held.push("assume:anonymous".into());
    let held = match realm {
        Realm::Tester(_) => roles::normalize(held),
        Realm::Deployment => f.rt.block_on(f.svc.expand(&held)).expect("roles"),
    };
    for s in &a.given {
        assert!(
            ScopeExpr::scope(s.as_str()).satisfied_by(&held),
            "{s:?} given beyond {held:?}"
        );
    }
    if let Ext::Json {
        certificate: Some(_),
        ..
    }
    | Ext::Json {
        authorized: Some(_),
        ..
    } = &input.ext
    {
        // Scopes a certificate or `authorizedScopes` name are valid scopes.
        for s in &a.given {
            assert!(valid_scope(s), "invalid scope {s:?} granted");
        }
    }
    if cert_expiry.is_some() {
        let expires = a.expires.expect("credentials with a certificate expire").0;
        assert!(Some(expires) <= cert_expiry);
        assert!(
            i128::from(expires) <= i128::from(NOW_MS) + i128::from(MAX_LIFETIME_MS + CERT_SKEW_MS),
            "{a:?}"
        );
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(Unstructured::new(data));
});
