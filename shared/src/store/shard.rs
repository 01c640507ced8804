//! Keys of the sharded, time-ordered index partitions that background passes walk with
//! `sk <= now`: one partition per shard so that no partition key is hot on DynamoDB.

use crate::time::Ts;

/// Number of shards of each time-ordered index.
pub const SHARDS: u32 = 4;

/// Zero-padded so that string order is numeric order (dates up to year 2286).
pub fn time_key(t: Ts) -> String {
    let mut out = String::with_capacity(13);
    push_padded(&mut out, t.millis().max(0) as u64, 13);
    out
}

/// `<time key>:<rest>`, the sort key of a time-ordered entry.
pub fn time_keyed(t: Ts, rest: &str) -> String {
    let mut out = String::with_capacity(14 + rest.len());
    push_padded(&mut out, t.millis().max(0) as u64, 13);
    out.push(':');
    out.push_str(rest);
    out
}

/// Appends `n` in decimal, zero-padded to `width` digits (more if it needs them). Written by
/// hand: these keys are made several times a write, and `format!` costs ten times as much.
fn push_padded(out: &mut String, mut n: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let start = i.min(digits.len().saturating_sub(width));
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&digits[start..]).unwrap_or_default());
}

/// The shard of a key (a taskId, a task group id) in the time-ordered indexes.
pub fn shard_of(key: &str) -> u32 {
    // FNV-1a: stable across processes and versions, unlike std's hasher.
    let mut h: u32 = 0x811c9dc5;
    for b in key.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x01000193);
    }
    h % SHARDS
}

/// A set of shards, one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shards(u32);

impl Shards {
    /// Every shard.
    pub const ALL: Shards = Shards((1 << SHARDS) - 1);
    /// No shard.
    pub const NONE: Shards = Shards(0);

    /// The shard of `key` alone.
    pub fn of(key: &str) -> Shards {
        Shards(1 << shard_of(key))
    }

    /// True if `shard` is in the set.
    pub fn contains(self, shard: u32) -> bool {
        self.0 & (1 << shard) != 0
    }

    /// The set as bits (for an atomic), and back.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// The set of `bits`' shards.
    pub fn from_bits(bits: u32) -> Shards {
        Shards(bits & Self::ALL.0)
    }
}

/// Partition key of a sharded time-ordered index.
pub fn shard_pk(index: &str, shard: u32) -> String {
    let mut out = String::with_capacity(index.len() + 3);
    out.push_str(index);
    out.push('#');
    push_padded(&mut out, shard.into(), 1);
    out
}

/// Upper bound for "every time-ordered key due at `now`".
pub fn due_upto(now: Ts) -> String {
    time_keyed(now, "\u{10FFFF}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_keys_sort_numerically() {
        assert!(time_key(Ts(999)) < time_key(Ts(1000)));
        assert!(time_key(Ts(1_700_000_000_000)) < time_key(Ts(17_000_000_000_000)));
    }

    #[test]
    fn keys_are_written_as_format_would() {
        for ms in [
            0,
            7,
            999,
            1_700_000_000_123,
            9_999_999_999_999,
            10_000_000_000_000,
            i64::MAX,
        ] {
            assert_eq!(time_key(Ts(ms)), format!("{ms:013}"));
            assert_eq!(time_keyed(Ts(ms), "t"), format!("{ms:013}:t"));
        }
        assert_eq!(time_key(Ts(-5)), "0000000000000");
        for shard in [0, 3, 10, 4_294_967_295] {
            assert_eq!(shard_pk("deadline", shard), format!("deadline#{shard}"));
        }
    }

    #[test]
    fn due_bound_includes_everything_up_to_now() {
        let k = format!("{}:abc", time_key(Ts(5000)));
        assert!(k <= due_upto(Ts(5000)));
        assert!(k > due_upto(Ts(4999)));
    }
}
