//! Hawk request signatures: the `Authorization: Hawk ...` header and `bewit` signed URLs.
//!
//! Verification is ours rather than the `hawk` crate's: that crate reads the system clock
//! (we take `now` as a parameter) and panics on a `ts` too large for `SystemTime`, which a
//! hostile header can send. The crate signs the requests in our tests, as an independent
//! implementation of the same scheme.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Longest accepted `Authorization` header or bewit (certificates with many scopes are long).
pub const MAX_CREDENTIAL_LEN: usize = 64 * 1024;
/// Clock skew tolerated on `ts`, in seconds (upstream's `timestampSkewSec`).
pub const SKEW_SECS: i64 = 15 * 60;

/// The request as the signature covers it.
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    /// HTTP method, upper-case.
    pub method: &'a str,
    /// Path and query exactly as sent (bewit included, if any).
    pub resource: &'a str,
    /// Host, lower-case, without port.
    pub host: &'a str,
    /// Port the client connected to.
    pub port: u16,
}

/// A parsed `Authorization: Hawk` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The clientId.
    pub id: String,
    /// Seconds since the epoch.
    pub ts: i64,
    /// Client nonce.
    pub nonce: String,
    /// The request MAC (decoded).
    pub mac: Vec<u8>,
    /// Payload hash (base64, as sent), if the client sent one.
    pub hash: Option<String>,
    /// Application data (base64 JSON for Taskcluster).
    pub ext: Option<String>,
    /// Hawk `app`, rarely used.
    pub app: Option<String>,
    /// Hawk `dlg`, rarely used.
    pub dlg: Option<String>,
}

/// A parsed bewit (`id\exp\mac\ext`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bewit {
    /// The clientId.
    pub id: String,
    /// Expiry, seconds since the epoch.
    pub exp: i64,
    /// The MAC (decoded).
    pub mac: Vec<u8>,
    /// Application data, if any.
    pub ext: Option<String>,
}

/// Why a signature was refused. Messages never contain secrets or MACs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HawkError(pub String);

fn err<T>(m: impl Into<String>) -> Result<T, HawkError> {
    Err(HawkError(m.into()))
}

fn parse_secs(v: &str, what: &str) -> Result<i64, HawkError> {
    // 12 digits reach year 33658: enough, and never overflows.
    if v.is_empty() || v.len() > 12 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return err(format!("invalid {what}"));
    }
    v.parse::<i64>()
        .map_err(|_| HawkError(format!("invalid {what}")))
}

fn decode_mac(v: &str) -> Result<Vec<u8>, HawkError> {
    let mac = STANDARD
        .decode(v)
        .map_err(|_| HawkError("invalid mac".into()))?;
    if mac.len() != 32 {
        return err("invalid mac");
    }
    Ok(mac)
}

/// Parses an `Authorization` header value (`Hawk id="..", ts="..", ...`).
pub fn parse_header(value: &str) -> Result<Header, HawkError> {
    if value.len() > MAX_CREDENTIAL_LEN {
        return err("authorization header too long");
    }
    let Some((scheme, mut rest)) = value.trim_start().split_once(' ') else {
        return err("authorization header is not a Hawk header");
    };
    if !scheme.eq_ignore_ascii_case("hawk") {
        return err("authorization header is not a Hawk header");
    }
    let mut fields: [Option<&str>; 8] = [None; 8];
    const NAMES: [&str; 8] = ["id", "ts", "nonce", "mac", "hash", "ext", "app", "dlg"];
    loop {
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_ascii_whitespace());
        if rest.is_empty() {
            break;
        }
        let Some((name, after)) = rest.split_once('=') else {
            return err("bad authorization header syntax");
        };
        let Some(after) = after.strip_prefix('"') else {
            return err("bad authorization header syntax");
        };
        let Some((val, after)) = after.split_once('"') else {
            return err("bad authorization header syntax");
        };
        let Some(slot) = NAMES.iter().position(|n| *n == name.trim()) else {
            return err("unknown attribute in authorization header");
        };
        if fields[slot].replace(val).is_some() {
            return err("duplicate attribute in authorization header");
        }
        // Hawk allows only printable ASCII without `"` and `\` in attribute values.
        if !val.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'\\') {
            return err("bad character in authorization header");
        }
        rest = after;
    }
    let need = |i: usize| -> Result<&str, HawkError> {
        fields[i]
            .filter(|v| !v.is_empty())
            .ok_or_else(|| HawkError(format!("authorization header lacks {}", NAMES[i])))
    };
    let opt = |i: usize| fields[i].filter(|v| !v.is_empty()).map(String::from);
    Ok(Header {
        id: need(0)?.to_string(),
        ts: parse_secs(need(1)?, "ts")?,
        nonce: need(2)?.to_string(),
        mac: decode_mac(need(3)?)?,
        hash: opt(4),
        ext: opt(5),
        app: opt(6),
        dlg: opt(7),
    })
}

/// Parses a bewit (base64url of `id\exp\mac\ext`).
pub fn parse_bewit(value: &str) -> Result<Bewit, HawkError> {
    if value.len() > MAX_CREDENTIAL_LEN {
        return err("bewit too long");
    }
    let raw = decode_any_base64(value).ok_or_else(|| HawkError("invalid bewit encoding".into()))?;
    let text = String::from_utf8(raw).map_err(|_| HawkError("invalid bewit encoding".into()))?;
    let parts: Vec<&str> = text.split('\\').collect();
    let [id, exp, mac, ext] = parts[..] else {
        return err("invalid bewit structure");
    };
    if id.is_empty() {
        return err("bewit lacks an id");
    }
    Ok(Bewit {
        id: id.to_string(),
        exp: parse_secs(exp, "bewit expiry")?,
        mac: decode_mac(mac)?,
        ext: (!ext.is_empty()).then(|| ext.to_string()),
    })
}

/// Decodes base64 in either alphabet, with or without padding (clients differ: Python's
/// mohawk uses the URL-safe alphabet, the JS client the standard one).
pub fn decode_any_base64(s: &str) -> Option<Vec<u8>> {
    let normal: String = s
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    STANDARD_NO_PAD.decode(normal).ok()
}

/// `resource` with its `bewit` query argument removed (the bewit cannot sign itself), and
/// the bewit's value.
pub fn strip_bewit(resource: &str) -> (String, Option<String>) {
    let Some((path, query)) = resource.split_once('?') else {
        return (resource.to_string(), None);
    };
    let mut bewit = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| match p.strip_prefix("bewit=") {
            Some(v) if bewit.is_none() => {
                bewit = Some(v.to_string());
                false
            }
            _ => true,
        })
        .collect();
    if bewit.is_none() {
        return (resource.to_string(), None);
    }
    let kept = kept.join("&");
    if kept.is_empty() {
        (path.to_string(), bewit)
    } else {
        (format!("{path}?{kept}"), bewit)
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

struct Normalized<'a> {
    kind: &'a str,
    ts: i64,
    nonce: &'a str,
    hash: &'a str,
    ext: &'a str,
    app: Option<&'a str>,
    dlg: Option<&'a str>,
}

fn normalized(req: &SignedRequest, resource: &str, n: &Normalized) -> String {
    let mut s = format!(
        "hawk.1.{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
        n.kind,
        n.ts,
        n.nonce,
        req.method.to_ascii_uppercase(),
        resource,
        req.host.to_ascii_lowercase(),
        req.port,
        n.hash,
        escape(n.ext)
    );
    if let Some(app) = n.app {
        s.push_str(&format!("{app}\n{}\n", n.dlg.unwrap_or_default()));
    }
    s
}

fn keyed(key: &str, text: &str) -> Hmac<Sha256> {
    crate::mac::keyed(key.as_bytes(), text.as_bytes())
}

/// HMAC-SHA256 of `text` under `key`, base64.
pub fn hmac_b64(key: &str, text: &str) -> String {
    STANDARD.encode(keyed(key, text).finalize().into_bytes())
}

/// Constant-time check that `mac` is the HMAC-SHA256 of `text` under `key`.
pub fn mac_matches(key: &str, text: &str, mac: &[u8]) -> bool {
    keyed(key, text).verify_slice(mac).is_ok()
}

/// The Hawk payload hash of a body: base64(SHA-256 of `hawk.1.payload\n<mime>\n<body>\n`).
pub fn payload_hash(content_type: &str, body: &[u8]) -> String {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let mut h = Sha256::new();
    h.update(format!("hawk.1.payload\n{mime}\n").as_bytes());
    h.update(body);
    h.update(b"\n");
    STANDARD.encode(h.finalize())
}

/// Constant-time equality of two strings (lengths are not secret).
pub fn ct_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Checks a header's MAC with `key`, its timestamp against `now_secs` (±15 min) and, when
/// the header carries a payload hash, that hash against the body.
pub fn verify_header(
    h: &Header,
    req: &SignedRequest,
    key: &str,
    now_secs: i64,
    body: Option<(&str, &[u8])>,
) -> Result<(), HawkError> {
    let fields = Normalized {
        kind: "header",
        ts: h.ts,
        nonce: &h.nonce,
        hash: h.hash.as_deref().unwrap_or_default(),
        ext: h.ext.as_deref().unwrap_or_default(),
        app: h.app.as_deref(),
        dlg: h.dlg.as_deref(),
    };
    let signed = mac_matches(key, &normalized(req, req.resource, &fields), &h.mac)
        // The official Rust client (`taskcluster` 114) signs the path without the query; so
        // that it works unchanged, a MAC over the bare path is accepted too. Only the query
        // is then unsigned: method, path, host, body hash and ext stay covered.
        || req.resource.split_once('?').is_some_and(|(path, _)| {
            mac_matches(key, &normalized(req, path, &fields), &h.mac)
        });
    if !signed {
        return err("bad mac");
    }
    if let (Some(sent), Some((ct, bytes))) = (&h.hash, body) {
        if !ct_eq(sent, &payload_hash(ct, bytes)) {
            return err("bad payload hash");
        }
    }
    if (h.ts - now_secs).abs() > SKEW_SECS {
        return err("stale timestamp (more than 15 minutes of clock skew)");
    }
    Ok(())
}

/// Checks a bewit's MAC with `key` over the request without its bewit, and its expiry.
pub fn verify_bewit(
    b: &Bewit,
    req: &SignedRequest,
    resource_without_bewit: &str,
    key: &str,
    now_secs: i64,
) -> Result<(), HawkError> {
    let text = normalized(
        req,
        resource_without_bewit,
        &Normalized {
            kind: "bewit",
            ts: b.exp,
            nonce: "",
            hash: "",
            ext: b.ext.as_deref().unwrap_or_default(),
            app: None,
            dlg: None,
        },
    );
    if !mac_matches(key, &text, &b.mac) {
        return err("bad mac");
    }
    if b.exp < now_secs {
        return err("access expired");
    }
    Ok(())
}

/// Builds an `Authorization` header value (used by the auth API's tests and tools).
pub fn sign_header(
    client_id: &str,
    key: &str,
    req: &SignedRequest,
    ts: i64,
    nonce: &str,
    hash: Option<&str>,
    ext: Option<&str>,
) -> String {
    let text = normalized(
        req,
        req.resource,
        &Normalized {
            kind: "header",
            ts,
            nonce,
            hash: hash.unwrap_or_default(),
            ext: ext.unwrap_or_default(),
            app: None,
            dlg: None,
        },
    );
    let mut v = format!(
        "Hawk id=\"{client_id}\", ts=\"{ts}\", nonce=\"{nonce}\", mac=\"{}\"",
        hmac_b64(key, &text)
    );
    if let Some(h) = hash {
        v.push_str(&format!(", hash=\"{h}\""));
    }
    if let Some(e) = ext {
        v.push_str(&format!(", ext=\"{e}\""));
    }
    v
}

/// Builds a bewit value for a GET of `resource` valid until `exp` (seconds).
pub fn sign_bewit(
    client_id: &str,
    key: &str,
    req: &SignedRequest,
    exp: i64,
    ext: Option<&str>,
) -> String {
    let text = normalized(
        req,
        req.resource,
        &Normalized {
            kind: "bewit",
            ts: exp,
            nonce: "",
            hash: "",
            ext: ext.unwrap_or_default(),
            app: None,
            dlg: None,
        },
    );
    let raw = format!(
        "{client_id}\\{exp}\\{}\\{}",
        hmac_b64(key, &text),
        ext.unwrap_or_default()
    );
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQ: SignedRequest = SignedRequest {
        method: "POST",
        resource: "/api/queue/v1/task/abc?x=1",
        host: "example.com",
        port: 443,
    };

    fn header(ts: i64, hash: Option<&str>, ext: Option<&str>) -> Header {
        parse_header(&sign_header("c", "k", &REQ, ts, "n0nce", hash, ext)).unwrap()
    }

    #[test]
    fn a_signed_header_verifies_within_the_skew_only() {
        let h = header(1_000_000, None, None);
        assert_eq!(h.id, "c");
        assert!(verify_header(&h, &REQ, "k", 1_000_000 + 899, None).is_ok());
        assert!(verify_header(&h, &REQ, "k", 1_000_000 - 900, None).is_ok());
        assert!(verify_header(&h, &REQ, "k", 1_000_000 + 901, None).is_err());
        assert!(verify_header(&h, &REQ, "wrong", 1_000_000, None).is_err());
        let other = SignedRequest {
            resource: "/api/queue/v1/task/abd?x=1",
            ..REQ
        };
        assert!(verify_header(&h, &other, "k", 1_000_000, None).is_err());
        // A MAC over the bare path (as the Rust client signs) is accepted; another path not.
        let bare = SignedRequest {
            resource: "/api/queue/v1/task/abc",
            ..REQ
        };
        let h2 = parse_header(&sign_header("c", "k", &bare, 7, "n", None, None)).unwrap();
        assert!(verify_header(&h2, &REQ, "k", 7, None).is_ok());
        let other_port = SignedRequest { port: 80, ..REQ };
        assert!(verify_header(&h, &other_port, "k", 1_000_000, None).is_err());
    }

    #[test]
    fn the_payload_hash_is_checked_when_present() {
        let hash = payload_hash("application/json; charset=utf-8", b"{}");
        assert_eq!(hash, payload_hash("Application/JSON", b"{}"));
        let h = header(5, Some(&hash), None);
        let ok = Some(("application/json", &b"{}"[..]));
        assert!(verify_header(&h, &REQ, "k", 5, ok).is_ok());
        let tampered = Some(("application/json", &b"{\"a\":1}"[..]));
        assert_eq!(
            verify_header(&h, &REQ, "k", 5, tampered).unwrap_err().0,
            "bad payload hash"
        );
        // A hash in the header that the MAC does not cover is a tampered header.
        let mut h2 = header(5, None, None);
        h2.hash = Some(hash);
        assert!(verify_header(&h2, &REQ, "k", 5, ok).is_err());
    }

    #[test]
    fn ext_is_covered_by_the_mac() {
        let mut h = header(5, None, Some("e30"));
        assert!(verify_header(&h, &REQ, "k", 5, None).is_ok());
        h.ext = Some("e31".into());
        assert!(verify_header(&h, &REQ, "k", 5, None).is_err());
    }

    #[test]
    fn malformed_headers_are_refused() {
        for bad in [
            "",
            "Basic abc",
            "Hawk",
            "Hawk id=\"a\"",
            "Hawk id=\"a\", ts=\"1\", nonce=\"n\", mac=\"!!\"",
            "Hawk id=\"a\", ts=\"99999999999999999999\", nonce=\"n\", mac=\"AAAA\"",
            "Hawk id=\"a\", ts=\"-1\", nonce=\"n\", mac=\"AAAA\"",
            "Hawk id=\"a\", id=\"b\", ts=\"1\", nonce=\"n\", mac=\"AAAA\"",
            "Hawk id=\"a\", foo=\"b\", ts=\"1\", nonce=\"n\", mac=\"AAAA\"",
            "Hawk id=\"a, ts=\"1\"",
            "Hawk id=a",
        ] {
            assert!(parse_header(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn bewits_verify_until_they_expire() {
        let req = SignedRequest {
            method: "GET",
            resource: "/api/auth/v1/test-authenticate-get/?a=b",
            host: "h",
            port: 8080,
        };
        let bewit = sign_bewit("c", "k", &req, 100, Some("e30"));
        let url = format!("/api/auth/v1/test-authenticate-get/?a=b&bewit={bewit}");
        let (stripped, got) = strip_bewit(&url);
        assert_eq!(stripped, req.resource);
        let b = parse_bewit(&got.unwrap()).unwrap();
        assert_eq!(
            (b.id.as_str(), b.exp, b.ext.as_deref()),
            ("c", 100, Some("e30"))
        );
        assert!(verify_bewit(&b, &req, &stripped, "k", 100).is_ok());
        assert_eq!(
            verify_bewit(&b, &req, &stripped, "k", 101).unwrap_err().0,
            "access expired"
        );
        assert!(verify_bewit(&b, &req, &stripped, "x", 50).is_err());
        assert_eq!(
            strip_bewit("/p?bewit=x").0,
            "/p".to_string(),
            "a lone bewit leaves no `?`"
        );
        assert_eq!(strip_bewit("/p?bewit=x&a=1").0, "/p?a=1");
    }

    #[test]
    fn base64_is_accepted_in_both_alphabets() {
        let bytes = [0xfb, 0xff, 0xfe, 0x01];
        let std = STANDARD.encode(bytes);
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        assert_ne!(std.trim_end_matches('='), url);
        assert_eq!(decode_any_base64(&std).unwrap(), bytes);
        assert_eq!(decode_any_base64(&url).unwrap(), bytes);
        assert!(decode_any_base64("*").is_none());
    }

    #[test]
    fn constant_time_equality_is_equality() {
        assert!(ct_eq("abc", "abc"));
        assert!(!ct_eq("abc", "abd"));
        assert!(!ct_eq("abc", "ab"));
    }
}
