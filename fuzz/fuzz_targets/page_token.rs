//! Continuation tokens (`page::decode_token`), as a client sends them back, and their
//! encoding. Properties: any string decodes to a cursor or to `400 InvalidRequestArguments`
//! (never a panic or another error); a decoded cursor encodes to a token that decodes to it
//! again; any cursor (three arbitrary strings) survives encode → decode.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use shared::error::ErrorCode;
use shared::page::{decode_token, encode_token};
use shared_fuzz::text;

fuzz_target!(|data: &[u8]| {
    if let Some(token) = text(data) {
        match decode_token(token) {
            Ok(cursor) => assert_eq!(decode_token(&encode_token(&cursor)).ok(), Some(cursor)),
            Err(e) => assert_eq!(e.code, ErrorCode::InvalidRequestArguments, "{e:?}"),
        }
    }
    if let Ok(cursor) = <(String, String, String)>::arbitrary(&mut Unstructured::new(data)) {
        let token = encode_token(&cursor);
        assert!(token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(decode_token(&token).ok(), Some(cursor));
    }
});
