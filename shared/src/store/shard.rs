//! Keys of the sharded, time-ordered index partitions that background passes walk with
//! `sk <= now`: one partition per shard so that no partition key is hot on DynamoDB.

use crate::time::Ts;

/// Number of shards of each time-ordered index.
pub const SHARDS: u32 = 4;

/// Zero-padded so that string order is numeric order (dates up to year 2286).
pub fn time_key(t: Ts) -> String {
    format!("{:013}", t.millis().max(0))
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

/// Partition key of a sharded time-ordered index.
pub fn shard_pk(index: &str, shard: u32) -> String {
    format!("{index}#{shard}")
}

/// Upper bound for "every time-ordered key due at `now`".
pub fn due_upto(now: Ts) -> String {
    format!("{}:\u{10FFFF}", time_key(now))
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
    fn due_bound_includes_everything_up_to_now() {
        let k = format!("{}:abc", time_key(Ts(5000)));
        assert!(k <= due_upto(Ts(5000)));
        assert!(k > due_upto(Ts(4999)));
    }
}
