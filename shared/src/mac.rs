//! HMAC-SHA256, keyed in one place for Hawk, certificates, temporary credentials and local
//! blob URLs.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// How many keys' prepared states a process keeps before it starts again from none.
const PREPARED_KEYS: usize = 256;

/// The prepared state of each key used lately. An HMAC hashes its key's two padded blocks
/// before the text: two of the four or five SHA-256 blocks of a short text's HMAC. The same
/// keys come back call after call (a worker's token, the issuer's token that signs and
/// derives temporary credentials), so their states are kept. The state is a function of the
/// key alone, so a cache in any number of processes, frozen or killed, is never wrong; it is
/// bounded, and emptied when full (a key used once costs one insert).
static PREPARED: Mutex<Option<Prepared>> = Mutex::new(None);

/// Keys' HMAC-SHA256 states before any text.
type Prepared = HashMap<Box<[u8]>, Hmac<Sha256>>;

/// `key`'s HMAC-SHA256 state before any text.
fn prepared(key: &[u8]) -> Hmac<Sha256> {
    let mut guard = PREPARED.lock().unwrap_or_else(PoisonError::into_inner);
    let cache = guard.get_or_insert_with(HashMap::new);
    if let Some(m) = cache.get(key) {
        return m.clone();
    }
    // HMAC accepts keys of any length (long keys are hashed, short ones padded), so
    // construction cannot fail for any input.
    let m = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    if cache.len() >= PREPARED_KEYS {
        cache.clear();
    }
    cache.insert(key.into(), m.clone());
    m
}

/// HMAC-SHA256 under `key`, fed `text`.
pub(crate) fn keyed(key: &[u8], text: &[u8]) -> Hmac<Sha256> {
    let mut m = prepared(key);
    m.update(text);
    m
}

/// The HMAC-SHA256 bytes of `text` under `key`.
pub(crate) fn digest(key: &[u8], text: &[u8]) -> Vec<u8> {
    keyed(key, text).finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231's test case 2, and the same through a kept state, through a full cache that
    /// starts again, and under a long key (hashed first).
    #[test]
    fn a_kept_state_gives_the_same_mac() {
        let expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(
            hex(digest(b"Jefe", b"what do ya want for nothing?")),
            expected
        );
        assert_eq!(
            hex(digest(b"Jefe", b"what do ya want for nothing?")),
            expected
        );
        for i in 0..PREPARED_KEYS + 1 {
            digest(format!("key {i}").as_bytes(), b"text");
        }
        assert_eq!(
            hex(digest(b"Jefe", b"what do ya want for nothing?")),
            expected
        );
        let long = [0xaau8; 131];
        let plain = <Hmac<Sha256> as Mac>::new_from_slice(&long)
            .map(|m| m.chain_update(b"Test Using Larger Than Block-Size Key - Hash Key First"))
            .map(|m| m.finalize().into_bytes().to_vec());
        for _ in 0..2 {
            assert_eq!(
                Ok(digest(
                    &long,
                    b"Test Using Larger Than Block-Size Key - Hash Key First"
                )),
                plain
            );
        }
        assert!(
            PREPARED
                .lock()
                .map(|c| c.as_ref().map_or(0, HashMap::len) <= PREPARED_KEYS)
                .unwrap_or(false),
            "bounded"
        );
    }
}
