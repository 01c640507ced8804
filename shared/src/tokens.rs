//! Static clients' access tokens (root's, the queue's own) that an operator may rotate where
//! they are kept, Secrets Manager as deployed, without a redeploy.
//!
//! Every process holds the token it read and reads it again when [`Rotation::refresh_ms`] has
//! passed since (at its next use: a frozen instance has no timer), and at once when a
//! signature made with it fails, at most every [`MISMATCH_REREAD_MS`]. So a rotated token
//! works on its first use, and the old one stops working on every instance within the refresh.
//!
//! Temporary credentials outlive a rotation: the queue hands workers certificates signed with
//! its token, and an instance that has not re-read yet still signs with the old one. The
//! token before the current one therefore still verifies certificates (never direct use) for
//! [`Rotation::grace_ms`] after the current one was made. Whoever must cut it off sooner
//! removes its `AWSPREVIOUS` label.

use crate::time::{Ts, HOUR, MINUTE};
use async_trait::async_trait;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The shortest time between two reads that failed signatures cause, per token and process:
/// a stream of bad signatures costs at most one read per this many milliseconds.
pub const MISMATCH_REREAD_MS: i64 = 10_000;

/// When a token is read again and how long the one before it still verifies certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// Read again at the first use this long after the last read.
    pub refresh_ms: i64,
    /// The previous token verifies certificates this long after the current one was made.
    pub grace_ms: i64,
}

impl Default for Rotation {
    /// Five minutes between reads: one Secrets Manager call per token per busy instance in
    /// that time ($0.05 per 10,000 calls: about $0.09 a month for the two tokens of an instance
    /// busy all month). Two hours of grace: longer than any certificate the queue issues (one
    /// hour, an object download's) plus a refresh of a signer that has not re-read yet.
    fn default() -> Self {
        Rotation {
            refresh_ms: 5 * MINUTE,
            grace_ms: 2 * HOUR,
        }
    }
}

/// What a source holds at one read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenVersions {
    /// The token in use.
    pub current: String,
    /// When the current token was made (its version's creation), if the source knows.
    pub since: Option<Ts>,
}

/// Where a token is kept.
#[async_trait]
pub trait TokenSource: Send + Sync {
    /// The token as kept now.
    async fn read(&self) -> Result<TokenVersions, String>;

    /// The token the current one replaced, if still kept. Asked only when a certificate
    /// fails within the grace, so that start and refreshes read the current one alone.
    async fn previous(&self) -> Result<Option<String>, String>;
}

#[derive(Debug, Clone)]
struct Held {
    versions: TokenVersions,
    read_at: Ts,
    forced_at: Option<Ts>,
}

/// A token as this process holds it: fixed (given in configuration), or read from a source
/// and read again as the module describes.
pub struct RotatingToken {
    source: Option<Arc<dyn TokenSource>>,
    rotation: Rotation,
    held: Mutex<Held>,
    /// Counts reads, so calls that queued behind one do not read again.
    reads: AtomicU64,
    reading: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for RotatingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RotatingToken")
            .field("rotation", &self.rotation)
            .field("read", &self.source.is_some())
            .finish_non_exhaustive()
    }
}

impl RotatingToken {
    /// A token that never changes.
    pub fn fixed(token: impl Into<String>) -> Self {
        Self::holding(None, Rotation::default(), Ts(0), Self::only(token.into()))
    }

    /// The token `source` holds at `now`, read again as [`Rotation`] says.
    pub async fn read_from(
        source: Arc<dyn TokenSource>,
        rotation: Rotation,
        now: Ts,
    ) -> Result<Self, String> {
        let versions = source.read().await?;
        Ok(Self::holding(Some(source), rotation, now, versions))
    }

    fn only(current: String) -> TokenVersions {
        TokenVersions {
            current,
            since: None,
        }
    }

    fn holding(
        source: Option<Arc<dyn TokenSource>>,
        rotation: Rotation,
        now: Ts,
        versions: TokenVersions,
    ) -> Self {
        RotatingToken {
            source,
            rotation,
            held: Mutex::new(Held {
                versions,
                read_at: now,
                forced_at: None,
            }),
            reads: AtomicU64::new(0),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    /// `f` of what is held (every request asks: nothing is copied but what `f` takes).
    fn with_held<T>(&self, f: impl FnOnce(&Held) -> T) -> T {
        match self.held.lock() {
            Ok(h) => f(&h),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    /// The token as last read, without reading (for signatures that must not wait).
    pub fn cached(&self) -> String {
        self.with_held(|h| h.versions.current.clone())
    }

    /// The token, read again first if the refresh has passed since the last read.
    pub async fn current(&self, now: Ts) -> String {
        let due = self.with_held(|h| now.0 - h.read_at.0 >= self.rotation.refresh_ms);
        if self.source.is_some() && due {
            self.read_again(now, false).await;
        }
        self.cached()
    }

    /// The tokens to try after a signature failed with `tried`: the token as read again now
    /// (if reads for mismatches are not too frequent) when it differs, then, if what was
    /// signed is a certificate, the previous token within its grace.
    pub async fn after_mismatch(&self, tried: &str, now: Ts, certificate: bool) -> Vec<String> {
        let Some(source) = &self.source else {
            return vec![];
        };
        self.read_again(now, true).await;
        let (current, since) = self.with_held(|h| (h.versions.current.clone(), h.versions.since));
        let mut out = vec![];
        if current != tried {
            out.push(current);
        }
        let in_grace = since.is_none_or(|since| now.0 < since.0 + self.rotation.grace_ms);
        if certificate && in_grace {
            match source.previous().await {
                Ok(Some(p)) if p != tried => out.push(p),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "reading a rotated token's previous version failed")
                }
            }
        }
        out
    }

    /// Reads the source unless another call read it while this one waited, or (`forced`, for
    /// a mismatch) another mismatch did less than [`MISMATCH_REREAD_MS`] ago. A scheduled
    /// read does not hold a mismatch back: a rotation just after it must work at its first
    /// use. A failed read keeps the token held and is retried at the next mismatch or
    /// refresh.
    async fn read_again(&self, now: Ts, forced: bool) {
        let Some(source) = &self.source else { return };
        let before = self.reads.load(Ordering::SeqCst);
        let _one = self.reading.lock().await;
        if self.reads.load(Ordering::SeqCst) != before {
            return;
        }
        let recent = |at: Ts| now.0 - at.0 < MISMATCH_REREAD_MS;
        let skip = self.with_held(|h| h.forced_at.is_some_and(recent));
        if forced && skip {
            return;
        }
        let read = source.read().await;
        self.reads.fetch_add(1, Ordering::SeqCst);
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        if forced {
            held.forced_at = Some(now);
        }
        match read {
            Ok(mut v) => {
                if v.current != held.versions.current && v.since.is_none() {
                    // A source without dates: the grace runs from when this process saw it.
                    v.since = Some(now);
                } else if v.current == held.versions.current && v.since.is_none() {
                    v.since = held.versions.since;
                }
                held.versions = v;
                held.read_at = now;
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading a rotated token failed; keeping the one held");
                // Retried after a mismatch's interval rather than a whole refresh.
                held.read_at = Ts(now.0 - self.rotation.refresh_ms + MISMATCH_REREAD_MS);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source an operator rotates: each rotation makes a new current and keeps the last.
    struct Kept {
        /// The current version and the token before it.
        versions: Mutex<(TokenVersions, Option<String>)>,
        reads: AtomicU64,
    }

    impl Kept {
        fn new(token: &str) -> Arc<Self> {
            Arc::new(Kept {
                versions: Mutex::new((
                    TokenVersions {
                        current: token.into(),
                        since: Some(Ts(0)),
                    },
                    None,
                )),
                reads: AtomicU64::new(0),
            })
        }
        fn rotate(&self, token: &str, at: Ts) {
            let mut v = self.versions.lock().unwrap();
            let old = std::mem::replace(&mut v.0.current, token.into());
            v.0.since = Some(at);
            v.1 = Some(old);
        }
        fn reads(&self) -> u64 {
            self.reads.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl TokenSource for Kept {
        async fn read(&self) -> Result<TokenVersions, String> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Ok(self.versions.lock().unwrap().0.clone())
        }

        async fn previous(&self) -> Result<Option<String>, String> {
            Ok(self.versions.lock().unwrap().1.clone())
        }
    }

    const ROT: Rotation = Rotation {
        refresh_ms: 60_000,
        grace_ms: 600_000,
    };

    /// A source holding "a", and a token read from it at `at`.
    async fn started(at: Ts) -> (Arc<Kept>, RotatingToken) {
        let kept = Kept::new("a");
        let t = RotatingToken::read_from(kept.clone(), ROT, at)
            .await
            .unwrap();
        (kept, t)
    }

    #[tokio::test]
    async fn a_rotated_token_is_read_at_its_first_mismatch_and_on_schedule() {
        let (kept, t) = started(Ts(1_000)).await;
        assert_eq!(t.current(Ts(30_000)).await, "a");
        assert_eq!(kept.reads(), 1, "no read before the refresh");
        kept.rotate("b", Ts(40_000));
        // A signature made with the new token fails against "a": read again, "b" to try.
        assert_eq!(t.after_mismatch("a", Ts(41_000), false).await, vec!["b"]);
        // The old one used directly fails against "b": nothing else to try (the previous is
        // for certificates).
        assert!(t.after_mismatch("b", Ts(60_000), false).await.is_empty());
        // A certificate signed with the old token: within the grace, "a" is tried.
        assert_eq!(t.after_mismatch("b", Ts(60_000), true).await, vec!["a"]);
        assert!(t.after_mismatch("b", Ts(640_001), true).await.is_empty());
        // Without a mismatch, a rotation is seen at the first use after the refresh.
        kept.rotate("c", Ts(700_000));
        let reads = kept.reads();
        assert_eq!(t.current(Ts(700_000)).await, "b", "640_001 read it last");
        assert_eq!(t.current(Ts(700_001)).await, "c");
        assert_eq!(kept.reads(), reads + 1);
    }

    /// A rotation moments after the token was read (a function's start) works at its first
    /// use, not only once a mismatch interval has passed.
    #[tokio::test]
    async fn a_rotation_just_after_a_read_works_at_its_first_use() {
        let (kept, t) = started(Ts(0)).await;
        kept.rotate("b", Ts(500));
        assert_eq!(t.after_mismatch("a", Ts(1_000), false).await, vec!["b"]);
        assert_eq!(kept.reads(), 2);
    }

    #[tokio::test]
    async fn bad_signatures_read_at_most_once_per_interval() {
        let (kept, t) = started(Ts(0)).await;
        let t = Arc::new(t);
        let mut calls = vec![];
        for i in 0..50 {
            let t = t.clone();
            calls.push(tokio::spawn(async move {
                t.after_mismatch("wrong", Ts(20_000 + i), false).await
            }));
        }
        for c in calls {
            assert_eq!(c.await.unwrap(), vec!["a"]);
        }
        assert_eq!(kept.reads(), 2, "the first read and one for 50 mismatches");
        t.after_mismatch("wrong", Ts(25_000), false).await;
        assert_eq!(kept.reads(), 2);
        t.after_mismatch("wrong", Ts(30_050), false).await;
        assert_eq!(kept.reads(), 3);
    }

    #[tokio::test]
    async fn a_fixed_token_is_never_read() {
        let t = RotatingToken::fixed("x");
        assert_eq!(t.current(Ts(i64::MAX / 2)).await, "x");
        assert!(t.after_mismatch("y", Ts(0), true).await.is_empty());
    }
}
