//! Temporary credentials, as Taskcluster's clients and auth service define them.

use crate::ids::new_slugid;
use crate::records::task::Run;
use crate::time::Ts;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::json;

/// The queue's own credentials, used to issue temporary credentials to workers.
#[derive(Clone)]
pub struct IssuerCredentials {
    /// The issuing clientId.
    pub client_id: String,
    /// Its accessToken (never logged).
    pub access_token: String,
}

impl std::fmt::Debug for IssuerCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuerCredentials")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// The queue's own client as a running queue holds it: its id and its token, which an operator
/// may rotate ([`crate::tokens`]).
#[derive(Debug, Clone)]
pub struct Issuer {
    /// The issuing clientId.
    pub client_id: String,
    /// Its accessToken.
    pub token: std::sync::Arc<crate::tokens::RotatingToken>,
}

impl Issuer {
    /// The credentials to sign with at `now` (the token read again if its refresh is due).
    pub async fn at(&self, now: Ts) -> IssuerCredentials {
        IssuerCredentials {
            client_id: self.client_id.clone(),
            access_token: self.token.current(now).await,
        }
    }
}

impl From<IssuerCredentials> for Issuer {
    fn from(c: IssuerCredentials) -> Self {
        Issuer {
            client_id: c.client_id,
            token: std::sync::Arc::new(crate::tokens::RotatingToken::fixed(c.access_token)),
        }
    }
}

/// Temporary credentials as returned to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct TempCredentials {
    /// The (named) temporary clientId.
    pub client_id: String,
    /// The derived accessToken.
    pub access_token: String,
    /// The certificate, as a JSON string.
    pub certificate: String,
}

impl TempCredentials {
    /// `{clientId, accessToken, certificate}`.
    pub fn to_json(&self) -> serde_json::Value {
        json!({ "clientId": self.client_id, "accessToken": self.access_token, "certificate": self.certificate })
    }

    /// [`TempCredentials::to_json`], plus the same under `client_id` and `access_token`: the
    /// Rust download crate reads those names from an object artifact's credentials, the
    /// Python and JavaScript clients the camelCase ones.
    pub fn to_json_both_spellings(&self) -> serde_json::Value {
        let mut v = self.to_json();
        v["client_id"] = json!(self.client_id);
        v["access_token"] = json!(self.access_token);
        v
    }
}

fn hmac(key: &str, msg: &str) -> Vec<u8> {
    crate::mac::digest(key.as_bytes(), msg.as_bytes())
}

/// Issues named temporary credentials valid from `start` to `expiry`.
pub fn issue(
    issuer: &IssuerCredentials,
    client_id: &str,
    scopes: &[String],
    start: Ts,
    expiry: Ts,
) -> TempCredentials {
    let seed = format!("{}{}", new_slugid(), new_slugid());
    let (start, expiry) = (start.millis(), expiry.millis());
    // The text the signature covers: the certificate's fields, one per line, then the scopes.
    let mut text = format!(
        "version:1\nclientId:{client_id}\nissuer:{}\nseed:{seed}\nstart:{start}\nexpiry:{expiry}\nscopes:",
        issuer.client_id
    );
    for scope in scopes {
        text.push('\n');
        text.push_str(scope);
    }
    let signature = STANDARD.encode(hmac(&issuer.access_token, &text));
    /// The certificate as clients carry it, its keys in the order a JSON object sorts them.
    #[derive(serde::Serialize)]
    struct Certificate<'a> {
        expiry: i64,
        issuer: &'a str,
        scopes: &'a [String],
        seed: &'a str,
        signature: &'a str,
        start: i64,
        version: u32,
    }
    let certificate = Certificate {
        expiry,
        issuer: &issuer.client_id,
        scopes,
        seed: &seed,
        signature: &signature,
        start,
        version: 1,
    };
    TempCredentials {
        client_id: client_id.to_string(),
        access_token: crate::auth::cert::temp_access_token(&issuer.access_token, &seed),
        // A struct of strings, numbers and a list of strings always serializes.
        certificate: serde_json::to_string(&certificate).unwrap_or_default(),
    }
}

/// `<ms / 1000>` as JavaScript prints it: `1700000000` or `1700000000.12`.
pub fn js_seconds(t: Ts) -> String {
    let (s, ms) = (t.millis().div_euclid(1000), t.millis().rem_euclid(1000));
    if ms == 0 {
        s.to_string()
    } else {
        format!("{s}.{ms:03}").trim_end_matches('0').to_string()
    }
}

/// The credentials a worker gets for a claimed run: valid from `now` until its `takenUntil`.
pub fn for_claim(
    issuer: &IssuerCredentials,
    task_id: &str,
    run: &Run,
    task_scopes: &[String],
    now: Ts,
) -> TempCredentials {
    let run_id = run.run_id;
    let taken_until = run.taken_until.unwrap_or(now);
    let client_id = format!(
        "task-client/{task_id}/{run_id}/on/{}/{}/until/{}",
        run.worker_group.as_deref().unwrap_or_default(),
        run.worker_id.as_deref().unwrap_or_default(),
        js_seconds(taken_until)
    );
    let mut scopes = vec![
        format!("queue:reclaim-task:{task_id}/{run_id}"),
        format!("queue:resolve-task:{task_id}/{run_id}"),
        format!("queue:create-artifact:{task_id}/{run_id}"),
    ];
    scopes.extend(task_scopes.iter().cloned());
    issue(issuer, &client_id, &scopes, now, taken_until)
}

/// How long the credentials to download an object artifact are valid.
const OBJECT_DOWNLOAD_TTL_MS: i64 = crate::time::HOUR;
/// The longest the credentials to upload an object artifact are valid.
const OBJECT_UPLOAD_MAX_MS: i64 = crate::time::DAY;

/// `s` with every character a clientId may not hold replaced by `_` (artifact names may hold
/// spaces and quotes; a Hawk id may not hold quotes).
fn client_id_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "!@/:.+|_-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The credentials a worker gets with an object artifact: they may upload that one object,
/// until the artifact expires or a day has passed.
pub fn for_object_upload(
    issuer: &IssuerCredentials,
    task_id: &str,
    run: &Run,
    project_id: &str,
    object_name: &str,
    expires: Ts,
    now: Ts,
) -> TempCredentials {
    let client_id = format!(
        "artifact-upload/{task_id}/{}/on/{}/{}",
        run.run_id,
        client_id_part(run.worker_group.as_deref().unwrap_or_default()),
        client_id_part(run.worker_id.as_deref().unwrap_or_default()),
    );
    let scopes = [format!("object:upload:{project_id}:{object_name}")];
    let until = expires.min(now.plus(OBJECT_UPLOAD_MAX_MS));
    issue(issuer, &client_id, &scopes, now, until)
}

/// The credentials a reader of an object artifact gets: they may download that one object
/// for an hour.
pub fn for_object_download(
    issuer: &IssuerCredentials,
    task_id: &str,
    run_id: u32,
    artifact: &str,
    object_name: &str,
    now: Ts,
) -> TempCredentials {
    let client_id = format!(
        "artifact-download/{task_id}/{run_id}/{}",
        client_id_part(artifact)
    );
    let scopes = [format!("object:download:{object_name}")];
    issue(
        issuer,
        &client_id,
        &scopes,
        now,
        now.plus(OBJECT_DOWNLOAD_TTL_MS),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    #[test]
    fn seconds_print_like_javascript() {
        assert_eq!(js_seconds(Ts(1_700_000_000_000)), "1700000000");
        assert_eq!(js_seconds(Ts(1_700_000_000_120)), "1700000000.12");
        assert_eq!(js_seconds(Ts(1_700_000_000_123)), "1700000000.123");
    }

    #[test]
    fn the_certificate_signature_verifies_with_the_issuer_token() {
        let issuer = IssuerCredentials {
            client_id: "static/q".into(),
            access_token: "secret".into(),
        };
        let run: Run = serde_json::from_value(serde_json::json!({
            "runId": 0, "state": "running", "reasonCreated": "scheduled", "workerGroup": "g",
            "workerId": "w", "takenUntil": "1970-01-01T00:00:02.000Z", "scheduled": "1970-01-01T00:00:00.000Z"
        }))
        .unwrap();
        let c = for_claim(&issuer, "T", &run, &["x".into()], Ts(1000));
        assert_eq!(c.client_id, "task-client/T/0/on/g/w/until/2");
        let cert: serde_json::Value = serde_json::from_str(&c.certificate).unwrap();
        // The same text as the certificate's JSON object gives: keys sorted, nothing added.
        assert_eq!(c.certificate, cert.to_string());
        assert_eq!(cert["version"], 1);
        assert_eq!(cert["issuer"], "static/q");
        assert_eq!(
            (cert["start"].as_i64(), cert["expiry"].as_i64()),
            (Some(1000), Some(2000))
        );
        let text = format!(
            "version:1\nclientId:{}\nissuer:static/q\nseed:{}\nstart:1000\nexpiry:2000\nscopes:\nqueue:reclaim-task:T/0\nqueue:resolve-task:T/0\nqueue:create-artifact:T/0\nx",
            c.client_id,
            cert["seed"].as_str().unwrap()
        );
        assert_eq!(
            cert["signature"].as_str().unwrap(),
            STANDARD.encode(hmac("secret", &text))
        );
        assert_eq!(cert["seed"].as_str().unwrap().len(), 44);
        assert_eq!(
            c.access_token,
            URL_SAFE_NO_PAD.encode(hmac("secret", cert["seed"].as_str().unwrap()))
        );
    }
}
