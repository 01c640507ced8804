//! Temporary credentials: the certificate a client sends in `ext`, and its validation.

use super::hawk::{ct_eq, hmac_b64};
use crate::scopes::{is_valid_scope, ScopeExpr};
use crate::time::Ts;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;

/// Clock skew allowed on a certificate's start and expiry.
pub const CERT_SKEW_MS: i64 = 5 * 60 * 1000;
/// Longest allowed lifetime of temporary credentials.
pub const MAX_LIFETIME_MS: i64 = 31 * 24 * 3600 * 1000;

/// A parsed temporary-credentials certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    /// Scopes granted by the certificate.
    pub scopes: Vec<String>,
    /// Valid from (ms since the epoch).
    pub start: i64,
    /// Valid until (ms since the epoch).
    pub expiry: i64,
    /// 44-character random seed.
    pub seed: String,
    /// base64 HMAC-SHA256 of the certificate text under the issuer's accessToken.
    pub signature: String,
    /// The issuing clientId, for named credentials.
    pub issuer: Option<String>,
}

fn int(v: &Value) -> Option<i64> {
    // JSON has one number type; JS clients may send 1.7e12 as a float with no fraction.
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
            .map(|f| f as i64)
    })
}

/// Parses a certificate from `ext`: an object, or a JSON string holding one.
pub fn parse(v: &Value) -> Result<Certificate, String> {
    let owned;
    let v = match v {
        Value::String(s) => {
            owned = serde_json::from_str::<Value>(s)
                .map_err(|_| "certificate is not valid JSON".to_string())?;
            &owned
        }
        v => v,
    };
    let o = v.as_object().ok_or("certificate must be an object")?;
    if o.contains_key("clientId") {
        return Err("certificate must not contain clientId".into());
    }
    if o.get("version").and_then(int) != Some(1) {
        return Err("certificate version must be 1".into());
    }
    let text = |k: &str| -> Result<String, String> {
        o.get(k)
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| format!("certificate {k} must be a string"))
    };
    let scopes = o
        .get("scopes")
        .and_then(Value::as_array)
        .ok_or("certificate scopes must be an array")?
        .iter()
        .map(|s| s.as_str().map(String::from))
        .collect::<Option<Vec<_>>>()
        .ok_or("certificate scopes must be strings")?;
    if !scopes.iter().all(|s| is_valid_scope(s)) {
        return Err("certificate scopes must be valid scopes (printable ASCII)".into());
    }
    let issuer = match o.get("issuer") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err("certificate issuer must be a non-empty string".into()),
    };
    Ok(Certificate {
        scopes,
        start: o
            .get("start")
            .and_then(int)
            .ok_or("certificate start must be a number")?,
        expiry: o
            .get("expiry")
            .and_then(int)
            .ok_or("certificate expiry must be a number")?,
        seed: text("seed")?,
        signature: text("signature")?,
        issuer,
    })
}

impl Certificate {
    /// The signed text; named credentials also sign their clientId and issuer.
    pub fn signed_text(&self, client_id: &str) -> String {
        let mut lines = vec!["version:1".to_string()];
        if let Some(issuer) = &self.issuer {
            lines.push(format!("clientId:{client_id}"));
            lines.push(format!("issuer:{issuer}"));
        }
        lines.push(format!("seed:{}", self.seed));
        lines.push(format!("start:{}", self.start));
        lines.push(format!("expiry:{}", self.expiry));
        lines.push("scopes:".into());
        lines.extend(self.scopes.iter().cloned());
        lines.join("\n")
    }

    /// The issuing clientId: named issuer, else the presented clientId itself.
    pub fn issuer_of<'a>(&'a self, presented: &'a str) -> &'a str {
        self.issuer.as_deref().unwrap_or(presented)
    }

    /// Validates the certificate presented as `client_id`, issued by a client holding
    /// `issuer_scopes` (expanded) with `issuer_token`. Returns the effective scopes.
    pub fn validate(
        &self,
        client_id: &str,
        issuer_token: &str,
        issuer_scopes: &[String],
        now: Ts,
    ) -> Result<Vec<String>, String> {
        if self.seed.len() != 44 {
            return Err("certificate seed must be 44 characters".into());
        }
        if self.start > now.millis() + CERT_SKEW_MS {
            return Err("certificate is not yet valid".into());
        }
        if self.expiry < now.millis() - CERT_SKEW_MS {
            return Err("certificate has expired".into());
        }
        // Any i64 may arrive: `expiry - start` must not wrap (it could, to a short lifetime).
        if self
            .expiry
            .checked_sub(self.start)
            .is_none_or(|d| d > MAX_LIFETIME_MS)
        {
            return Err("certificate lifetime exceeds 31 days".into());
        }
        if !ct_eq(
            &self.signature,
            &hmac_b64(issuer_token, &self.signed_text(client_id)),
        ) {
            return Err("certificate has a bad signature".into());
        }
        if let Some(issuer) = &self.issuer {
            if issuer == client_id {
                return Err(
                    "named credentials must name a clientId other than their issuer".into(),
                );
            }
            let need = ScopeExpr::scope(format!("auth:create-client:{client_id}"));
            if !need.satisfied_by(issuer_scopes) {
                return Err(format!(
                    "issuer {issuer} lacks auth:create-client:{client_id} for named temporary credentials"
                ));
            }
        }
        if let Some(s) = self
            .scopes
            .iter()
            .find(|s| !ScopeExpr::scope(s.as_str()).satisfied_by(issuer_scopes))
        {
            return Err(format!("certificate scope {s} is not held by its issuer"));
        }
        Ok(self.scopes.clone())
    }
}

/// The accessToken of temporary credentials: base64url (no padding) of HMAC-SHA256(seed).
pub fn temp_access_token(issuer_token: &str, seed: &str) -> String {
    URL_SAFE_NO_PAD.encode(crate::mac::digest(issuer_token.as_bytes(), seed.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::creds::{issue, IssuerCredentials};
    use serde_json::json;

    const NOW: Ts = Ts(1_700_000_000_000);

    fn issuer() -> IssuerCredentials {
        IssuerCredentials {
            client_id: "static/queue".into(),
            access_token: "issuer-secret".into(),
        }
    }

    fn named(scopes: &[&str], start: i64, expiry: i64) -> (String, String, Certificate) {
        let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
        let c = issue(&issuer(), "task-client/x", &scopes, Ts(start), Ts(expiry));
        let cert = parse(&json!(c.certificate)).unwrap();
        (c.client_id, c.access_token, cert)
    }

    fn all() -> Vec<String> {
        vec!["*".into()]
    }

    #[test]
    fn credentials_we_issue_validate_and_derive_their_token() {
        let (id, token, cert) = named(&["a", "b:*"], NOW.0, NOW.0 + 60_000);
        assert_eq!(cert.issuer_of(&id), "static/queue");
        assert_eq!(token, temp_access_token("issuer-secret", &cert.seed));
        let scopes = cert.validate(&id, "issuer-secret", &all(), NOW).unwrap();
        assert_eq!(scopes, vec!["a".to_string(), "b:*".to_string()]);
    }

    #[test]
    fn time_bounds_allow_five_minutes_of_skew_and_31_days() {
        let (id, _, cert) = named(&[], NOW.0 + 299_000, NOW.0 + 600_000);
        assert!(cert.validate(&id, "issuer-secret", &all(), NOW).is_ok());
        let (id, _, cert) = named(&[], NOW.0 + 301_000, NOW.0 + 600_000);
        assert!(cert.validate(&id, "issuer-secret", &all(), NOW).is_err());
        let (id, _, cert) = named(&[], NOW.0 - 900_000, NOW.0 - 299_000);
        assert!(cert.validate(&id, "issuer-secret", &all(), NOW).is_ok());
        let (id, _, cert) = named(&[], NOW.0 - 900_000, NOW.0 - 301_000);
        assert!(cert.validate(&id, "issuer-secret", &all(), NOW).is_err());
        let (id, _, cert) = named(&[], NOW.0, NOW.0 + MAX_LIFETIME_MS + 1);
        assert!(cert.validate(&id, "issuer-secret", &all(), NOW).is_err());
    }

    #[test]
    fn signature_issuer_and_scopes_are_enforced() {
        let (id, _, cert) = named(&["queue:x"], NOW.0, NOW.0 + 60_000);
        assert!(cert.validate(&id, "other-secret", &all(), NOW).is_err());
        assert!(cert
            .validate("task-client/y", "issuer-secret", &all(), NOW)
            .is_err());
        let only_scope = vec!["queue:x".to_string()];
        let e = cert
            .validate(&id, "issuer-secret", &only_scope, NOW)
            .unwrap_err();
        assert!(e.contains("auth:create-client"), "{e}");
        let enough = vec!["queue:x".into(), "auth:create-client:task-client/*".into()];
        assert!(cert.validate(&id, "issuer-secret", &enough, NOW).is_ok());
        let lacking = vec!["auth:create-client:*".to_string()];
        assert!(cert.validate(&id, "issuer-secret", &lacking, NOW).is_err());
        let mut tampered = cert.clone();
        tampered.scopes.push("more".into());
        assert!(tampered
            .validate(&id, "issuer-secret", &all(), NOW)
            .is_err());
        let mut short = cert.clone();
        short.seed.pop();
        assert!(short.validate(&id, "issuer-secret", &all(), NOW).is_err());
    }

    #[test]
    fn extreme_times_cannot_wrap_the_lifetime_check() {
        // Found by fuzzing (fuzz/seeds/cert): `i64::MAX - i64::MIN` overflowed; with
        // wrapping arithmetic it came out as -1, a lifetime within 31 days.
        let seed = "a".repeat(44);
        let mut cert = Certificate {
            scopes: vec![],
            start: i64::MIN,
            expiry: i64::MAX,
            seed,
            signature: String::new(),
            issuer: None,
        };
        cert.signature = hmac_b64("tok", &cert.signed_text("c"));
        let e = cert.validate("c", "tok", &all(), NOW).unwrap_err();
        assert!(e.contains("31 days"), "{e}");
    }

    #[test]
    fn unnamed_certificates_sign_without_client_and_issuer() {
        let seed = "a".repeat(44);
        let mut cert = Certificate {
            scopes: vec!["s".into()],
            start: NOW.0,
            expiry: NOW.0 + 1000,
            seed,
            signature: String::new(),
            issuer: None,
        };
        cert.signature = hmac_b64("tok", &cert.signed_text("ignored"));
        assert!(!cert.signed_text("c").contains("clientId"));
        assert!(cert.validate("perm", "tok", &all(), NOW).is_ok());
        assert_eq!(cert.issuer_of("perm"), "perm");
    }

    #[test]
    fn malformed_certificates_are_refused() {
        let good = json!({"version": 1, "scopes": [], "start": 1, "expiry": 2, "seed": "s", "signature": "x"});
        assert!(parse(&good).is_ok());
        assert!(parse(&json!(good.to_string())).is_ok());
        for (k, v) in [
            ("version", json!(2)),
            ("scopes", json!("a")),
            ("scopes", json!([1])),
            ("start", json!("1")),
            ("seed", json!(5)),
            ("issuer", json!(3)),
            ("clientId", json!("c")),
        ] {
            let mut bad = good.clone();
            bad[k] = v;
            assert!(parse(&bad).is_err(), "{k} accepted");
        }
        assert!(parse(&json!("{")).is_err());
        // Found by fuzzing: scopes are one per line in the signed text, so a line break
        // would make `["a\nb"]` and `["a", "b"]` one signature.
        let mut broken = good.clone();
        broken["scopes"] = json!(["a\nb"]);
        assert!(parse(&broken).is_err());
        assert!(parse(&json!([1])).is_err());
    }
}
