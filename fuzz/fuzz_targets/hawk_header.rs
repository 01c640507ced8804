//! The `Authorization: Hawk ...` parser, then verification with a fixed key.
//! Input: the header value. Properties: a parsed header has every required attribute, a
//! 32-byte MAC, a timestamp of at most 12 digits and only printable attribute values; the
//! header we sign with the same attributes parses back to them and verifies (within the
//! 15-minute skew, not beyond); the parsed header verifies exactly when its MAC is that one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::auth::hawk::{parse_header, sign_header, verify_header, SignedRequest, SKEW_SECS};
use shared_fuzz::{text, HOST, KEY, PORT};

const REQ: SignedRequest = SignedRequest {
    method: "POST",
    resource: "/api/queue/v1/task/fN1SbArXTPSVFNUvaOlinQ",
    host: HOST,
    port: PORT,
};

fn printable(s: &str) -> bool {
    s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

fuzz_target!(|data: &[u8]| {
    let Some(value) = text(data) else { return };
    let Ok(h) = parse_header(value) else { return };
    assert!(!h.id.is_empty() && !h.nonce.is_empty());
    assert_eq!(h.mac.len(), 32);
    assert!((0..=999_999_999_999).contains(&h.ts));
    for v in [Some(&h.id), Some(&h.nonce), h.hash.as_ref(), h.ext.as_ref()]
        .into_iter()
        .chain([h.app.as_ref(), h.dlg.as_ref()])
        .flatten()
    {
        assert!(printable(v), "{v:?}");
    }

    let verdict = verify_header(&h, &REQ, KEY, h.ts, None);
    let ours = sign_header(
        &h.id,
        KEY,
        &REQ,
        h.ts,
        &h.nonce,
        h.hash.as_deref(),
        h.ext.as_deref(),
    );
    let back = parse_header(&ours).expect("a header we signed parses");
    assert_eq!(
        (&back.id, back.ts, &back.nonce, &back.hash, &back.ext),
        (&h.id, h.ts, &h.nonce, &h.hash, &h.ext)
    );
    assert!(verify_header(&back, &REQ, KEY, h.ts + SKEW_SECS, None).is_ok());
    assert!(verify_header(&back, &REQ, KEY, h.ts - SKEW_SECS, None).is_ok());
    assert!(verify_header(&back, &REQ, KEY, h.ts + SKEW_SECS + 1, None).is_err());
    assert!(verify_header(&back, &REQ, "another key", h.ts, None).is_err());
    if h.app.is_none() {
        // Without `app` the MAC covers exactly what ours covers.
        assert_eq!(verdict.is_ok(), h.mac == back.mac, "{verdict:?}");
    }
    // With a body: a signed payload hash must match it.
    if back.hash.is_some() {
        let body = Some(("application/json", &b"{}"[..]));
        let hash = shared::auth::hawk::payload_hash("application/json", b"{}");
        let ok = verify_header(&back, &REQ, KEY, h.ts, body).is_ok();
        assert_eq!(ok, back.hash.as_deref() == Some(hash.as_str()));
    }
});
