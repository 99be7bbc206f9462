//! Repeating jobs (protocol.md §9): a schedule's spec and its record in the queue's `cron` table.
//!
//! A spec is a cron expression, standard five fields with an optional leading seconds field,
//! read by the `croner` crate (`@hourly` and the like, ranges, steps, names, `L`, `W`, `#`),
//! in UTC; or `EVERY <ms>`, a fixed period. A record is
//! `<next>|<last>|<priority>|<every>|<spec>\n<payload>`: the next firing (unix ms; 0 when the
//! spec never fires again), the last one (0: none yet), the job's priority, the period (0 for a
//! cron expression), the expression (empty for a period), then the payload's bytes.

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// Most schedules one queue holds, so a visit of the timer reads a bounded table.
pub const MAX_SCHEDULES: u64 = 1_000;
/// Longest schedule name and cron expression, in bytes.
pub const MAX_NAME_LEN: usize = 256;
pub const MAX_SPEC_LEN: usize = 256;
/// Shortest period: one timer tick.
pub const MIN_EVERY_MS: i64 = 10;

/// When a schedule fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// A cron expression, as given.
    Cron(String),
    /// Every so many ms, on the grid of its first firing.
    Every(i64),
}

impl Spec {
    /// Parses a cron expression (`EMQCRON`-worthy reason otherwise, the parser's own words).
    pub fn cron(spec: &[u8]) -> Result<Spec, String> {
        let text = std::str::from_utf8(spec).map_err(|_| "the spec is not UTF-8".to_string())?;
        if text.is_empty() || text.len() > MAX_SPEC_LEN || text.contains(['|', '\n']) {
            return Err(format!(
                "the spec must be 1 to {MAX_SPEC_LEN} bytes without '|' or a newline"
            ));
        }
        parse(text)?;
        Ok(Spec::Cron(text.to_string()))
    }

    /// The first firing strictly after `after_ms`; `None` when there is none (a date that never
    /// comes, or past the parser's horizon).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match self {
            Spec::Every(ms) => after_ms.checked_add(*ms),
            Spec::Cron(text) => {
                let cron = parse(text).ok()?;
                let after = chrono::DateTime::from_timestamp_millis(after_ms)?;
                let next = cron.find_next_occurrence(&after, false).ok()?;
                Some(next.timestamp_millis())
            }
        }
    }

    /// The firing after `fired` that is the first one later than `now`: a schedule that missed
    /// several firings (a server down over them) fires once, then keeps its grid.
    pub fn next_since(&self, fired: i64, now: i64) -> Option<i64> {
        match self {
            Spec::Every(ms) if *ms > 0 => {
                let behind = now.saturating_sub(fired).max(0) / ms + 1;
                fired.checked_add(behind.checked_mul(*ms)?)
            }
            _ => self.next_after(now.max(fired)),
        }
    }
}

fn parse(text: &str) -> Result<Cron, String> {
    let parser = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build();
    let cron = parser.parse(text).map_err(|e| e.to_string())?;
    // A field that allows no value never matches, and the parser's search for a firing would
    // walk every minute up to its horizon (seconds of work): refuse such a spec at once.
    let p = &cron.pattern;
    // (The crate keeps its component type private; its fields and methods are public.)
    macro_rules! empty {
        ($c:expr) => {
            $c.values().is_empty() && !$c.has_modifiers()
        };
    }
    let never = empty!(p.seconds)
        || empty!(p.minutes)
        || empty!(p.hours)
        || empty!(p.months)
        || (empty!(p.days) && empty!(p.days_of_week));
    if never {
        return Err("the spec never fires: one of its fields allows no value".into());
    }
    Ok(cron)
}

/// A schedule, as its record holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub spec: Spec,
    pub payload: Vec<u8>,
    pub priority: i64,
    /// The next firing, unix ms (`None`: it never fires again).
    pub next: Option<i64>,
    /// The last firing, unix ms.
    pub last: Option<i64>,
}

impl Schedule {
    pub fn encode(&self) -> Vec<u8> {
        let (every, spec) = match &self.spec {
            Spec::Every(ms) => (*ms, ""),
            Spec::Cron(text) => (0, text.as_str()),
        };
        let head = format!(
            "{}|{}|{}|{every}|{spec}\n",
            self.next.unwrap_or(0),
            self.last.unwrap_or(0),
            self.priority
        );
        let mut v = head.into_bytes();
        v.extend_from_slice(&self.payload);
        v
    }

    /// Reads a record back; `None` for one EchoMQ did not write.
    pub fn parse(record: &[u8]) -> Option<Schedule> {
        let nl = record.iter().position(|&b| b == b'\n')?;
        let head = std::str::from_utf8(&record[..nl]).ok()?;
        let mut parts = head.splitn(5, '|');
        let mut int = || parts.next()?.parse::<i64>().ok();
        let (next, last, priority, every) = (int()?, int()?, int()?, int()?);
        let spec = parts.next()?;
        // The expression is parsed when the schedule fires, not each time its record is read.
        let spec = match every {
            0 if !spec.is_empty() => Spec::Cron(spec.to_string()),
            ms if ms > 0 => Spec::Every(ms),
            _ => return None,
        };
        let when = |t: i64| (t > 0).then_some(t);
        Some(Schedule {
            spec,
            payload: record[nl + 1..].to_vec(),
            priority,
            next: when(next),
            last: when(last),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_796_142_588_297; // 2026-12-01T16:29:48.297Z

    #[test]
    fn cron_specs_fire_on_their_fields_in_utc() {
        let every_five = Spec::cron(b"*/5 * * * *").expect("spec");
        assert_eq!(every_five.next_after(T), Some(1_796_142_600_000));
        let seconds = Spec::cron(b"*/2 * * * * *").expect("spec with seconds");
        assert_eq!(seconds.next_after(T), Some(1_796_142_590_000));
        assert_eq!(
            Spec::cron(b"@hourly").expect("nickname").next_after(T),
            Some(1_796_144_400_000)
        );
    }

    #[test]
    fn malformed_specs_quote_the_parsers_reason() {
        let err = Spec::cron(b"61 * * * *").expect_err("out of range");
        assert!(err.contains("out of bounds"), "{err}");
        let err = Spec::cron(b"* * *").expect_err("three fields");
        assert!(err.contains("5 or 6 fields"), "{err}");
        assert!(Spec::cron(b"0 0 1 1 * 2030").is_err(), "no year field");
        assert!(Spec::cron(b"* * * * *|x").is_err());
        assert!(Spec::cron(b"").is_err());
        let err = Spec::cron(b", * * * *").expect_err("no minute");
        assert!(err.contains("never fires"), "{err}");
    }

    #[test]
    fn a_schedule_behind_by_many_firings_fires_once_and_keeps_its_grid() {
        let every = Spec::Every(1_000);
        assert_eq!(every.next_since(T, T), Some(T + 1_000));
        assert_eq!(every.next_since(T, T + 5_500), Some(T + 6_000));
        let hourly = Spec::cron(b"0 * * * *").expect("spec");
        let fired = 1_796_140_800_000; // 16:00
        assert_eq!(
            hourly.next_since(fired, fired + 3 * 3_600_000 + 5),
            Some(fired + 4 * 3_600_000)
        );
    }

    #[test]
    fn records_round_trip_with_any_payload() {
        for spec in [Spec::Every(60_000), Spec::Cron("0 9 * * MON-FRI".into())] {
            let s = Schedule {
                spec,
                payload: b"bytes|with\nnewlines\x00".to_vec(),
                priority: -3,
                next: Some(T),
                last: None,
            };
            assert_eq!(Schedule::parse(&s.encode()), Some(s));
        }
        assert_eq!(Schedule::parse(b"garbage"), None);
        assert_eq!(Schedule::parse(b"1|0|0|-5|\np"), None);
    }
}
