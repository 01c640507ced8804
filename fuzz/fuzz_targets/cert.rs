//! Temporary-credentials certificates: `cert::parse`, then `validate` against a fixed issuer.
//! Input starting with `{` or `"` is the certificate's JSON as a client sends it in `ext`;
//! any other input builds a certificate field by field and signs it with the issuer's token
//! (so that validation gets past the signature to the time and scope checks).
//! Properties: parsing the object and the same object as a JSON string agree; a certificate
//! that validates has a 44-character seed, started no later than now + 5 min, expires no
//! earlier than now - 5 min, lasts at most 31 days (in exact arithmetic), is signed by the
//! issuer's token over exactly its fields, grants only valid scopes the issuer holds, and,
//! named, names another client the issuer may create.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use shared::auth::cert::{parse, CERT_SKEW_MS, MAX_LIFETIME_MS};
use shared::auth::hawk::{ct_eq, hmac_b64};
use shared::scopes::ScopeExpr;
use shared::time::Ts;
use shared_fuzz::{valid_scope, NOW_MS};

const ISSUER_TOKEN: &str = "issuer-access-token";
const CLIENT_ID: &str = "fuzz/client";

/// A time: near now (seconds away), or any number at all.
#[derive(Arbitrary, Debug)]
enum Time {
    Near(i32),
    Any(i64),
    Float(f64),
}

impl Time {
    fn json(&self) -> Value {
        match *self {
            Time::Near(s) => json!(NOW_MS + i64::from(s) * 1000),
            Time::Any(v) => json!(v),
            Time::Float(f) => json!(f),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Built<'a> {
    scopes: Vec<&'a str>,
    start: Time,
    expiry: Time,
    seed: &'a str,
    seed_44: bool,
    issuer: Option<&'a str>,
    client_id: Option<&'a str>,
    issuer_scopes: Vec<&'a str>,
    sign: bool,
    as_string: bool,
}

fn issuer_scopes(extra: &[&str]) -> Vec<String> {
    [
        "queue:*",
        "auth:create-client:fuzz/*",
        "assume:project:a",
        "x",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect()
}

fn check(v: &Value, client_id: &str, issuer_scopes: &[String]) {
    let parsed = parse(v);
    // The object and the same object as a JSON string agree. Not for float times: serde_json
    // may read a float literal one unit off (its fast parser), and only floats written by
    // hand reach it (clients send integers).
    let floats = ["version", "start", "expiry"]
        .iter()
        .any(|k| v.get(k).is_some_and(Value::is_f64));
    if v.is_object() && !floats {
        assert_eq!(parse(&Value::String(v.to_string())), parsed);
    }
    let Ok(cert) = parsed else { return };
    let Ok(scopes) = cert.validate(client_id, ISSUER_TOKEN, issuer_scopes, Ts(NOW_MS)) else {
        return;
    };
    assert_eq!(scopes, cert.scopes);
    assert_eq!(cert.seed.len(), 44);
    let (start, expiry, now) = (cert.start as i128, cert.expiry as i128, NOW_MS as i128);
    assert!(start <= now + CERT_SKEW_MS as i128);
    assert!(expiry >= now - CERT_SKEW_MS as i128);
    assert!(expiry - start <= MAX_LIFETIME_MS as i128, "{cert:?}");
    assert!(ct_eq(
        &cert.signature,
        &hmac_b64(ISSUER_TOKEN, &cert.signed_text(client_id))
    ));
    for s in &scopes {
        // A scope with a line break would sign the same text as two scopes.
        assert!(valid_scope(s), "invalid scope {s:?} granted");
        assert!(ScopeExpr::scope(s.as_str()).satisfied_by(issuer_scopes));
    }
    if let Some(issuer) = &cert.issuer {
        assert_ne!(issuer, client_id);
        let create = format!("auth:create-client:{client_id}");
        assert!(ScopeExpr::scope(create).satisfied_by(issuer_scopes));
    }
}

fuzz_target!(|data: &[u8]| {
    if matches!(data.first(), Some(b'{' | b'"')) {
        if let Ok(v) = serde_json::from_slice::<Value>(data) {
            check(&v, CLIENT_ID, &issuer_scopes(&[]));
        }
        return;
    }
    let Ok(b) = Built::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let seed = if b.seed_44 {
        format!("{:_<44.44}", b.seed)
    } else {
        b.seed.to_string()
    };
    let mut v = json!({
        "version": 1,
        "scopes": b.scopes,
        "start": b.start.json(),
        "expiry": b.expiry.json(),
        "seed": seed,
        "signature": "",
    });
    if let Some(i) = b.issuer {
        v["issuer"] = json!(i);
    }
    let client_id = b.client_id.unwrap_or(CLIENT_ID);
    if b.sign {
        // Sign what the parser reads, as an issuer would.
        if let Ok(c) = parse(&v) {
            v["signature"] = json!(hmac_b64(ISSUER_TOKEN, &c.signed_text(client_id)));
        }
    }
    if b.as_string {
        v = Value::String(v.to_string());
    }
    check(&v, client_id, &issuer_scopes(&b.issuer_scopes));
});
