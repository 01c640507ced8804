//! What the fuzz targets share: the fixed clock and keys, and generators of words shaped as
//! the schemas allow them, so that properties that hold only for valid input get valid input
//! often enough to be tested.

use arbitrary::{Arbitrary, Result, Unstructured};

/// The fixed "now" of every target, in milliseconds (2023-11-14).
pub const NOW_MS: i64 = 1_700_000_000_000;
/// The same in seconds, as Hawk counts.
pub const NOW_S: i64 = NOW_MS / 1000;
/// The accessToken every signature is checked with.
pub const KEY: &str = "fuzz-access-token-0123456789abcdefghijklmnopq";
/// Host and port of every request.
pub const HOST: &str = "queue.example.com";
/// Port of every request.
pub const PORT: u16 = 443;

/// The first `len` bytes of input as text: valid UTF-8 or nothing (HTTP hands the server
/// text, and `&str` is what the parsers take).
pub fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// True for a scope as Taskcluster allows it: printable ASCII (`^[\x20-\x7e]*$`).
pub fn valid_scope(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

const ID_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";

/// A word from `alphabet`, `min..=max` characters long.
pub fn word_from(u: &mut Unstructured, alphabet: &[u8], min: usize, max: usize) -> Result<String> {
    let len = u.int_in_range(min..=max)?;
    (0..len)
        .map(|_| Ok(char::from(*u.choose(alphabet)?)))
        .collect()
}

/// A routing-key word: shaped as its schema allows (`valid`), or any text at all.
#[derive(Debug, Clone)]
pub struct Word {
    /// The word.
    pub text: String,
    /// True if it matches the schema it stands for.
    pub valid: bool,
}

/// What a routing-key word must look like.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// `^[a-zA-Z0-9-_]{1,38}$` (provisionerId, workerGroup, workerId, schedulerId).
    Identifier,
    /// `^[a-z]([-a-z0-9]{0,36}[a-z0-9])?$`.
    WorkerType,
    /// A slugid v4 (taskId, taskGroupId).
    Slugid,
}

impl Shape {
    /// True if `s` has this shape.
    pub fn accepts(self, s: &str) -> bool {
        match self {
            Shape::Identifier => shared::ids::is_identifier(s),
            Shape::WorkerType => shared::ids::is_worker_type(s),
            Shape::Slugid => shared::ids::is_slugid(s),
        }
    }

    /// A word of this shape (mostly) or any text.
    pub fn word(self, u: &mut Unstructured) -> Result<Word> {
        let text = match u.int_in_range(0..=3u8)? {
            0 => String::arbitrary(u)?,
            _ => match self {
                Shape::Identifier => word_from(u, ID_CHARS, 1, 38)?,
                Shape::WorkerType => {
                    let mut w = word_from(u, b"abcdefghijklmnopqrstuvwxyz", 1, 1)?;
                    w.push_str(&word_from(
                        u,
                        b"abcdefghijklmnopqrstuvwxyz0123456789-",
                        0,
                        37,
                    )?);
                    w
                }
                Shape::Slugid => shared::ids::slugid_from(<[u8; 16]>::arbitrary(u)?),
            },
        };
        Ok(Word {
            valid: self.accepts(&text),
            text,
        })
    }
}
