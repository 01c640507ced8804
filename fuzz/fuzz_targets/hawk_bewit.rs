//! Bewits: `strip_bewit` on a whole resource (path and query), `parse_bewit` on what it
//! finds, verification with a fixed key, and `decode_any_base64` on the raw bytes.
//! Properties: stripping removes exactly the first `bewit=` argument and nothing else; a
//! parsed bewit has an id, a 32-byte MAC and a 12-digit expiry; the bewit we sign with the
//! same attributes is found, parsed back and verifies until it expires, not after; the
//! parsed bewit verifies exactly when its MAC is that one; bytes encoded in any of the four
//! base64 flavours decode back to themselves.
#![no_main]

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use libfuzzer_sys::fuzz_target;
use shared::auth::hawk::{
    decode_any_base64, parse_bewit, sign_bewit, strip_bewit, verify_bewit, SignedRequest,
};
use shared_fuzz::{text, HOST, KEY, NOW_S, PORT};

fn query_args(resource: &str) -> (&str, Vec<&str>) {
    match resource.split_once('?') {
        Some((path, q)) => (path, q.split('&').collect()),
        None => (resource, vec![]),
    }
}

fuzz_target!(|data: &[u8]| {
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        assert_eq!(
            decode_any_base64(&engine.encode(data)).as_deref(),
            Some(data)
        );
    }
    let Some(resource) = text(data) else { return };
    let _ = decode_any_base64(resource);

    let (stripped, bewit) = strip_bewit(resource);
    let Some(bewit) = bewit else {
        assert_eq!(stripped, resource);
        return;
    };
    // Exactly the first `bewit=` argument is gone, the others stay in order.
    let (path, args) = query_args(resource);
    let first = args
        .iter()
        .position(|a| a.starts_with("bewit="))
        .expect("a bewit argument");
    assert_eq!(args[first], format!("bewit={bewit}"));
    let mut kept = args.clone();
    kept.remove(first);
    let (path2, args2) = query_args(&stripped);
    assert_eq!(path2, path);
    if kept.join("&").is_empty() {
        assert!(!stripped.contains('?'));
    } else {
        assert_eq!(args2, kept);
    }

    let Ok(b) = parse_bewit(&bewit) else { return };
    assert!(!b.id.is_empty() && !b.id.contains('\\'));
    assert_eq!(b.mac.len(), 32);
    assert!((0..=999_999_999_999).contains(&b.exp));
    assert!(b
        .ext
        .as_ref()
        .is_none_or(|e| !e.is_empty() && !e.contains('\\')));

    let req = SignedRequest {
        method: "GET",
        resource,
        host: HOST,
        port: PORT,
    };
    let verdict = verify_bewit(&b, &req, &stripped, KEY, NOW_S);

    // Our bewit for the same attributes over the same resource.
    let ours = sign_bewit(
        &b.id,
        KEY,
        &SignedRequest {
            resource: &stripped,
            ..req
        },
        b.exp,
        b.ext.as_deref(),
    );
    let back = parse_bewit(&ours).expect("a bewit we signed parses");
    assert_eq!((&back.id, back.exp, &back.ext), (&b.id, b.exp, &b.ext));
    assert!(verify_bewit(&back, &req, &stripped, KEY, b.exp).is_ok());
    assert!(verify_bewit(&back, &req, &stripped, KEY, b.exp + 1).is_err());
    assert!(verify_bewit(&back, &req, &stripped, "another key", b.exp).is_err());
    assert_eq!(
        verdict.is_ok(),
        b.mac == back.mac && b.exp >= NOW_S,
        "{verdict:?}"
    );
    if strip_bewit(&stripped).1.is_none() {
        let sep = if stripped.contains('?') { '&' } else { '?' };
        let url = format!("{stripped}{sep}bewit={ours}");
        assert_eq!(strip_bewit(&url), (stripped.clone(), Some(ours)));
    }
});
