//! Timestamps with millisecond precision, rendered exactly as JavaScript's `Date.toJSON()`.

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Milliseconds since the Unix epoch. Every domain operation takes `now: Ts` as a parameter.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ts(pub i64);

/// One second, one minute, one hour and one day in milliseconds.
pub const SECOND: i64 = 1000;
/// One minute in milliseconds.
pub const MINUTE: i64 = 60 * SECOND;
/// One hour in milliseconds.
pub const HOUR: i64 = 60 * MINUTE;
/// One day in milliseconds.
pub const DAY: i64 = 24 * HOUR;

impl Ts {
    /// The wall clock, for entry points only; the domain receives `now` from its caller.
    pub fn now() -> Ts {
        Ts(Utc::now().timestamp_millis())
    }

    /// Parses an RFC 3339 date-time. Extra fractional digits are truncated to milliseconds,
    /// as JavaScript's `Date` does, so that equal instants compare equal.
    pub fn parse(s: &str) -> Option<Ts> {
        DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|d| Ts(d.with_timezone(&Utc).timestamp_millis()))
    }

    /// `self + ms`.
    pub fn plus(self, ms: i64) -> Ts {
        Ts(self.0.saturating_add(ms))
    }

    /// Milliseconds since the epoch.
    pub fn millis(self) -> i64 {
        self.0
    }

    /// Seconds from `earlier` to `self`, 0 if `earlier` is later (an age, for the figures).
    pub fn secs_since(self, earlier: Ts) -> f64 {
        (self.0 - earlier.0).max(0) as f64 / 1000.0
    }
}

impl fmt::Display for Ts {
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Utc.timestamp_millis_opt(self.0).single() {
            Some(d) => f.write_str(&d.to_rfc3339_opts(SecondsFormat::Millis, true)),
            None => write!(f, "invalid-time({})", self.0),
        }
    }
}

impl fmt::Debug for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Ts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ts::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("invalid date-time {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_javascript_to_json() {
        let t = Ts::parse("2026-01-02T03:04:05.1234567+00:00").unwrap();
        assert_eq!(t.to_string(), "2026-01-02T03:04:05.123Z");
        assert_eq!(
            Ts::parse("2026-01-02T03:04:05Z").unwrap().to_string(),
            "2026-01-02T03:04:05.000Z"
        );
    }

    #[test]
    fn offsets_are_normalised_to_utc() {
        let t = Ts::parse("2026-01-02T04:04:05.000+01:00").unwrap();
        assert_eq!(t.to_string(), "2026-01-02T03:04:05.000Z");
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(Ts::parse("yesterday").is_none());
    }
}

/// How long a background job may go on: a function runs its passes until a stated share of
/// its timeout ([`Budget::share_of`]), the local server for a few seconds per tick. Passes
/// check it between chunks of work too, so that a pass in flight ends within the headroom
/// whatever the store's pace.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    until: std::time::Instant,
}

/// The share of a function's time its passes may use; the rest is headroom for the chunk in
/// flight and the reply.
pub const BUDGET_SHARE: f64 = 0.8;

impl Budget {
    /// Until `d` from now.
    pub fn of(d: std::time::Duration) -> Budget {
        Budget {
            until: std::time::Instant::now() + d,
        }
    }

    /// [`BUDGET_SHARE`] of the time left until `deadline` (a Lambda invocation's).
    pub fn share_of(deadline: std::time::Instant) -> Budget {
        Budget::of(
            deadline
                .saturating_duration_since(std::time::Instant::now())
                .mul_f64(BUDGET_SHARE),
        )
    }

    /// True while time is left.
    pub fn left(&self) -> bool {
        std::time::Instant::now() < self.until
    }
}
