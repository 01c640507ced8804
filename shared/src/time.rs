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
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`. Every record, status and event renders several, so years
    /// 0–9999 are rendered by hand (a tenth of chrono's instructions); others through chrono.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (secs, ms) = (self.0.div_euclid(1000), self.0.rem_euclid(1000));
        let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        if !(0..=9999).contains(&y) {
            return match Utc.timestamp_millis_opt(self.0).single() {
                Some(d) => f.write_str(&d.to_rfc3339_opts(SecondsFormat::Millis, true)),
                None => write!(f, "invalid-time({})", self.0),
            };
        }
        let mut out = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut v: i64| {
            for i in (at..at + width).rev() {
                out[i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, 4, y);
        put(5, 2, m);
        put(8, 2, d);
        put(11, 2, day_secs / 3600);
        put(14, 2, day_secs / 60 % 60);
        put(17, 2, day_secs % 60);
        put(20, 3, ms);
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

/// The proleptic Gregorian (year, month, day) of a count of days since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
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

    /// The hand-rendered form is chrono's, over four centuries of instants and the edges.
    #[test]
    fn renders_as_chrono_does() {
        let chrono = |t: i64| {
            Utc.timestamp_millis_opt(t)
                .single()
                .map(|d| d.to_rfc3339_opts(SecondsFormat::Millis, true))
        };
        let mut t: i64 = -2_208_988_800_000; // 1900
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        while t < 10_413_792_000_000 {
            // 2300
            assert_eq!(Some(Ts(t).to_string()), chrono(t), "{t}");
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t += (x % (3 * DAY as u64)) as i64;
        }
        for t in [
            0,
            -1,
            1,
            -62_167_219_200_000,     // 0000-01-01
            253_402_300_799_999,     // 9999-12-31T23:59:59.999
            253_402_300_800_000,     // 10000: chrono's form
            -62_167_219_200_001,     // -0001: chrono's form
            951_782_400_000,         // 2000-02-29
            4_107_542_400_000 - DAY, // 2100-02-28
        ] {
            assert_eq!(Some(Ts(t).to_string()), chrono(t), "{t}");
        }
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

/// Paces writes that all land on one partition, which DynamoDB limits to 1,000 write units a
/// second: write `k` (counting from 0) may begin `k / per_sec` seconds after the first, so any
/// second holds at most `per_sec` writes plus the chunk in flight. Kept per pass, not per
/// process: one partition's writes come from the one pass that owns them.
#[derive(Debug)]
pub struct Pace {
    per_sec: u32,
    began: Option<std::time::Instant>,
    started: u64,
}

impl Pace {
    /// At most `per_sec` writes a second (0: unpaced).
    pub fn new(per_sec: u32) -> Pace {
        Pace {
            per_sec,
            began: None,
            started: 0,
        }
    }

    /// How long the writes after the first `started` wait, `elapsed` after the first began.
    pub fn wait(per_sec: u32, started: u64, elapsed: std::time::Duration) -> std::time::Duration {
        if per_sec == 0 {
            return std::time::Duration::ZERO;
        }
        let due = std::time::Duration::from_secs_f64(started as f64 / f64::from(per_sec));
        due.saturating_sub(elapsed)
    }

    /// Waits until the next `n` writes may begin, and counts them as begun.
    pub async fn before(&mut self, n: usize) {
        let began = *self.began.get_or_insert_with(std::time::Instant::now);
        let wait = Pace::wait(self.per_sec, self.started, began.elapsed());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        self.started += n as u64;
    }
}

#[cfg(test)]
mod pace_tests {
    use super::Pace;
    use std::time::Duration;

    #[test]
    fn write_k_waits_until_k_over_the_rate_after_the_first() {
        // The first chunk goes at once; at 400 a second the write after 16 waits 40 ms.
        assert_eq!(Pace::wait(400, 0, Duration::ZERO), Duration::ZERO);
        assert_eq!(
            Pace::wait(400, 16, Duration::ZERO),
            Duration::from_millis(40)
        );
        // Time already spent counts: a slow store is not slowed further.
        assert_eq!(
            Pace::wait(400, 16, Duration::from_millis(30)),
            Duration::from_millis(10)
        );
        assert_eq!(
            Pace::wait(400, 16, Duration::from_millis(90)),
            Duration::ZERO
        );
        // 5,000 writes take at least 12.5 s.
        assert_eq!(
            Pace::wait(400, 5_000, Duration::ZERO),
            Duration::from_millis(12_500)
        );
        assert_eq!(Pace::wait(0, 5_000, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn no_second_holds_more_than_the_rate_and_one_chunk() {
        // Chunks of 16 started as soon as allowed, against a store that answers at once.
        let (per_sec, chunk) = (400u32, 16u64);
        let mut starts = vec![];
        let (mut started, mut clock) = (0u64, Duration::ZERO);
        while started < 5_000 {
            clock += Pace::wait(per_sec, started, clock);
            starts.extend(std::iter::repeat_n(clock, chunk as usize));
            started += chunk;
        }
        for (i, from) in starts.iter().enumerate() {
            let within = starts[i..]
                .iter()
                .take_while(|t| **t < *from + Duration::from_secs(1))
                .count() as u64;
            assert!(within <= u64::from(per_sec) + chunk, "{within} in a second");
        }
    }
}
