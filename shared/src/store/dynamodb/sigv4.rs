//! Signature Version 4 for the adapter's DynamoDB requests: a `POST /` with a JSON body and the
//! same four headers every time, so the canonical request is written directly, and the signing
//! key (four HMACs) is derived once a day per access key instead of at every request. A unit
//! test checks each signature against the SDK's signer (`aws-sigv4`).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::SystemTime;

/// The headers a signed request carries besides `content-type`, `host` and `x-amz-target`.
pub struct Signed {
    /// `x-amz-date`.
    pub amz_date: String,
    /// `authorization`.
    pub authorization: String,
}

/// Signs DynamoDB requests to one host in one region.
pub struct Signer {
    region: String,
    host: String,
    path: String,
    /// The day's signing key, with the day and the access key it is for.
    key: Mutex<Option<(String, String, [u8; 32])>>,
}

/// The JSON protocol's content type, which every request sends (and signs).
pub const CONTENT_TYPE: &str = "application/x-amz-json-1.0";

fn hmac(key: &[u8], data: &[u8]) -> Result<[u8; 32], String> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).map_err(|e| e.to_string())?;
    mac.update(data);
    Ok(mac.finalize().into_bytes().into())
}

fn hex(bytes: &[u8], out: &mut String) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
}

impl Signer {
    /// A signer for requests to `path` (as in the URL, `/` for DynamoDB's own endpoints) on
    /// `host` (with its port when not the scheme's default) in `region`.
    pub fn new(region: &str, host: &str, path: &str) -> Signer {
        Signer {
            region: region.to_string(),
            host: host.to_string(),
            path: path.to_string(),
            key: Mutex::new(None),
        }
    }

    /// The day's signing key for `secret`, derived at most once a day per access key.
    fn key(&self, date: &str, access_key: &str, secret: &str) -> Result<[u8; 32], String> {
        if let Ok(kept) = self.key.lock() {
            if let Some((d, a, k)) = kept.as_ref() {
                if d == date && a == access_key {
                    return Ok(*k);
                }
            }
        }
        let k = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes())?;
        let k = hmac(&k, self.region.as_bytes())?;
        let k = hmac(&k, b"dynamodb")?;
        let k = hmac(&k, b"aws4_request")?;
        if let Ok(mut kept) = self.key.lock() {
            *kept = Some((date.to_string(), access_key.to_string(), k));
        }
        Ok(k)
    }

    /// Signs a request with `body` for operation header `target`, at `now`.
    pub fn sign(
        &self,
        access_key: &str,
        secret: &str,
        token: Option<&str>,
        target: &str,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Signed, String> {
        let t = chrono::DateTime::<chrono::Utc>::from(now);
        let amz_date = t.format("%Y%m%dT%H%M%SZ").to_string();
        let date = &amz_date[..8];
        let signed_headers = if token.is_some() {
            "content-type;host;x-amz-date;x-amz-security-token;x-amz-target"
        } else {
            "content-type;host;x-amz-date;x-amz-target"
        };
        let mut canonical = String::with_capacity(512);
        canonical.push_str("POST\n");
        canonical.push_str(&self.path);
        canonical.push_str("\n\ncontent-type:");
        canonical.push_str(CONTENT_TYPE);
        canonical.push_str("\nhost:");
        canonical.push_str(&self.host);
        canonical.push_str("\nx-amz-date:");
        canonical.push_str(&amz_date);
        if let Some(token) = token {
            canonical.push_str("\nx-amz-security-token:");
            canonical.push_str(token.trim());
        }
        canonical.push_str("\nx-amz-target:");
        canonical.push_str(target);
        canonical.push_str("\n\n");
        canonical.push_str(signed_headers);
        canonical.push('\n');
        hex(&Sha256::digest(body), &mut canonical);
        let scope = format!("{date}/{}/dynamodb/aws4_request", self.region);
        let mut to_sign = String::with_capacity(160);
        let _ = write!(to_sign, "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n");
        hex(&Sha256::digest(canonical.as_bytes()), &mut to_sign);
        let signature = hmac(&self.key(date, access_key, secret)?, to_sign.as_bytes())?;
        let mut authorization = String::with_capacity(256);
        let _ = write!(
            authorization,
            "AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed_headers}, Signature="
        );
        hex(&signature, &mut authorization);
        Ok(Signed {
            amz_date,
            authorization,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signature is the SDK's signer's for the same request, with and without a session
    /// token, on a default and an explicit port, across a change of day and of key.
    #[test]
    fn signatures_match_the_sdks_signer() {
        use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
        let cases = [
            (
                "https://dynamodb.eu-west-1.amazonaws.com/",
                "dynamodb.eu-west-1.amazonaws.com",
                "eu-west-1",
                None,
                1_764_000_000u64,
            ),
            (
                "http://127.0.0.1:4566/",
                "127.0.0.1:4566",
                "us-east-1",
                Some("FwoGZXIvYXdzE//token=="),
                1_764_000_001,
            ),
            (
                "http://127.0.0.1:4566/",
                "127.0.0.1:4566",
                "us-east-1",
                Some("FwoGZXIvYXdzE//token=="),
                1_764_100_000,
            ),
        ];
        let body = br#"{"TableName":"t","Key":{"pk":{"S":"a"},"sk":{"S":"b"}}}"#;
        let target = "DynamoDB_20120810.GetItem";
        let mut signers: Vec<Signer> = vec![];
        for (i, (url, host, region, token, secs)) in cases.into_iter().enumerate() {
            let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            let akid = if i == 2 { "AKIDOTHER" } else { "AKIDEXAMPLE" };
            let creds = aws_sdk_dynamodb::config::Credentials::new(
                akid,
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                token.map(String::from),
                None,
                "test",
            );
            let identity = creds.into();
            let params = aws_sigv4::sign::v4::SigningParams::builder()
                .identity(&identity)
                .region(region)
                .name("dynamodb")
                .time(now)
                .settings(SigningSettings::default())
                .build()
                .unwrap()
                .into();
            let headers = [("content-type", CONTENT_TYPE), ("x-amz-target", target)];
            let request =
                SignableRequest::new("POST", url, headers.into_iter(), SignableBody::Bytes(body))
                    .unwrap();
            let (instructions, _) = sign(request, &params).unwrap().into_parts();
            let want: std::collections::HashMap<&str, &str> = instructions.headers().collect();
            // The third request reuses the second's signer: a new day and key derive anew.
            if i < 2 {
                signers.push(Signer::new(region, host, "/"));
            }
            let signer = signers.last().unwrap();
            for _ in 0..2 {
                let got = signer
                    .sign(
                        akid,
                        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                        token,
                        target,
                        body,
                        now,
                    )
                    .unwrap();
                assert_eq!(got.authorization, want["authorization"], "case {i}");
                assert_eq!(got.amz_date, want["x-amz-date"], "case {i}");
            }
            assert_eq!(want.get("x-amz-security-token").copied(), token);
        }
    }
}
