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
        if let Some(t) = Ts::parse_rendered(s.as_bytes()) {
            return Some(t);
        }
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

impl Ts {
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` for years 0–9999, rendered by hand: every record, status
    /// and event holds several, and chrono takes ten times the instructions.
    fn render(self) -> Option<[u8; 24]> {
        let (secs, ms) = (self.0.div_euclid(1000), self.0.rem_euclid(1000));
        let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        if !(0..=9999).contains(&y) {
            return None;
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
        Some(out)
    }

    /// The inverse of [`Ts::render`]: exactly that form, a valid date and no leap second;
    /// anything else is left to chrono.
    fn parse_rendered(s: &[u8]) -> Option<Ts> {
        if s.len() != 24 || s[4] != b'-' || s[7] != b'-' || s[10] != b'T' {
            return None;
        }
        if s[13] != b':' || s[16] != b':' || s[19] != b'.' || s[23] != b'Z' {
            return None;
        }
        let num = |at: usize, width: usize| {
            s[at..at + width].iter().try_fold(0i64, |v, c| {
                c.is_ascii_digit().then(|| v * 10 + i64::from(c - b'0'))
            })
        };
        let (y, m, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
        let (h, min, sec, ms) = (num(11, 2)?, num(14, 2)?, num(17, 2)?, num(20, 3)?);
        let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
        let month_days = match m {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            1..=12 => 31,
            _ => return None,
        };
        if d < 1 || d > month_days || h > 23 || min > 59 || sec > 59 {
            return None;
        }
        let secs = days_from_civil(y, m, d) * 86_400 + h * 3600 + min * 60 + sec;
        Some(Ts(secs * 1000 + ms))
    }
}

impl fmt::Display for Ts {
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` ([`Ts::render`]); years outside 0–9999 through chrono.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.render() {
            Some(out) => f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?),
            None => match Utc.timestamp_millis_opt(self.0).single() {
                Some(d) => f.write_str(&d.to_rfc3339_opts(SecondsFormat::Millis, true)),
                None => write!(f, "invalid-time({})", self.0),
            },
        }
    }
}

/// The count of days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`, the inverse of [`civil_from_days`]).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
    /// As a string, written whole rather than through the formatter (which a serializer
    /// escapes piece by piece).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.render() {
            Some(out) => match std::str::from_utf8(&out) {
                Ok(text) => s.serialize_str(text),
                Err(_) => s.collect_str(self),
            },
            None => s.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for Ts {
    /// From a string, borrowed where the input allows (no copy of the text).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Ts;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 date-time")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Ts, E> {
                Ts::parse(s).ok_or_else(|| E::custom(format!("invalid date-time {s:?}")))
            }
        }
        d.deserialize_str(Visitor)
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

    /// The hand parser reads what chrono reads, instant for instant, over four centuries,
    /// and refuses what chrono refuses (leap seconds and other forms go to chrono itself).
    #[test]
    fn parses_as_chrono_does() {
        let chrono = |s: &str| {
            DateTime::parse_from_rfc3339(s)
                .ok()
                .map(|d| d.with_timezone(&Utc).timestamp_millis())
        };
        let mut t: i64 = -2_208_988_800_000; // 1900
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        while t < 10_413_792_000_000 {
            let text = Ts(t).to_string();
            assert_eq!(Ts::parse_rendered(text.as_bytes()), Some(Ts(t)), "{text}");
            assert_eq!(chrono(&text), Some(t), "{text}");
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t += (x % (3 * DAY as u64)) as i64;
        }
        for text in [
            "0000-01-01T00:00:00.000Z",
            "9999-12-31T23:59:59.999Z",
            "2000-02-29T12:00:00.000Z",
            "2100-02-29T12:00:00.000Z",
            "2026-02-30T00:00:00.000Z",
            "2026-04-31T00:00:00.000Z",
            "2026-13-01T00:00:00.000Z",
            "2026-00-01T00:00:00.000Z",
            "2026-01-00T00:00:00.000Z",
            "2026-01-01T24:00:00.000Z",
            "2026-01-01T23:60:00.000Z",
            "2026-06-30T23:59:60.000Z",
            "2026-01-01T00:00:00.00xZ",
            "2026-01-01 00:00:00.000Z",
            "+026-01-01T00:00:00.000Z",
        ] {
            assert_eq!(Ts::parse(text).map(|t| t.0), chrono(text), "{text}");
        }
    }

    /// Serialized and deserialized as JSON strings, through the hand-written paths.
    #[test]
    fn round_trips_through_json() {
        for t in [
            Ts(0),
            Ts(1_700_000_000_123),
            Ts(253_402_300_799_999),
            Ts(-1),
        ] {
            let text = serde_json::to_string(&t).unwrap();
            assert_eq!(text, format!("\"{t}\""));
            assert_eq!(serde_json::from_str::<Ts>(&text).unwrap(), t);
            let value = serde_json::to_value(t).unwrap();
            assert_eq!(serde_json::from_value::<Ts>(value).unwrap(), t);
        }
        assert!(serde_json::from_str::<Ts>("\"2026-02-30T00:00:00.000Z\"").is_err());
        assert!(serde_json::from_str::<Ts>("5").is_err());
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
