//! HMAC-SHA256, keyed in one place for Hawk, certificates, temporary credentials and local
//! blob URLs.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// HMAC-SHA256 under `key`, fed `text`. HMAC accepts keys of any length (long keys are
/// hashed, short ones padded), so construction cannot fail for any input.
pub(crate) fn keyed(key: &[u8], text: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    m.update(text);
    m
}

/// The HMAC-SHA256 bytes of `text` under `key`.
pub(crate) fn digest(key: &[u8], text: &[u8]) -> Vec<u8> {
    keyed(key, text).finalize().into_bytes().to_vec()
}
