//! How `baton log` and `baton watch` show times, local (the date shown
//! when it is not today) or UTC, and `log --since WHEN`, read on that
//! clock.

use crate::base::error::{Error, Result};
use crate::sys::{self, Civil};
use crate::text::sanitize::escape;

/// How times are shown: the local time zone or UTC, and today's date in
/// it (a time on another day shows its date).
pub struct Clock {
    utc: bool,
    today: (i32, u32, u32),
}

impl Clock {
    pub fn new(utc: bool) -> Clock {
        let mut c = Clock {
            utc,
            today: (0, 0, 0),
        };
        let now = c.civil(crate::spool::now_secs() as i64);
        c.today = (now.year, now.month, now.day);
        c
    }

    fn civil(&self, t: i64) -> Civil {
        let local = if self.utc { None } else { sys::local_time(t) };
        local.unwrap_or_else(|| utc_civil(t))
    }

    /// `HH:MM:SS`, or `YYYY-MM-DD HH:MM:SS` on another day.
    pub fn stamp(&self, time: f64) -> String {
        let c = self.civil(time.floor() as i64);
        let hms = format!("{:02}:{:02}:{:02}", c.hour, c.minute, c.second);
        if (c.year, c.month, c.day) == self.today {
            hms
        } else {
            format!("{:04}-{:02}-{:02} {hms}", c.year, c.month, c.day)
        }
    }

    /// The epoch seconds of a wall-clock time in this clock's zone.
    fn epoch(&self, c: Civil) -> Option<i64> {
        if self.utc {
            Some(utc_epoch(c))
        } else {
            sys::local_to_epoch(c)
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i32, m: u32, d: u32) -> i64 {
    let y = i64::from(y) - i64::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn utc_epoch(c: Civil) -> i64 {
    days_from_civil(c.year, c.month, c.day) * 86_400
        + i64::from(c.hour) * 3600
        + i64::from(c.minute) * 60
        + i64::from(c.second)
}

fn utc_civil(t: i64) -> Civil {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
    Civil {
        year,
        month,
        day,
        hour: secs / 3600,
        minute: secs / 60 % 60,
        second: secs % 60,
    }
}

/// What `log --since` accepts, for its error.
const SINCE_FORMS: &str = "use an age (30s, 10m, 2h, 1d), a date (2026-12-01), a date and time \
     (2026-12-01T09:30 or 2026-12-01 09:30:15; a final Z for UTC) or a time today (09:30)";

/// `log --since WHEN` as epoch seconds: an age before `now`, or a date
/// and time on `clock`'s wall clock (a final `Z`: UTC).
pub fn parse_since(when: &str, clock: &Clock, now: i64) -> Result<i64> {
    let bad = || Error::Usage(format!("log: --since {}: {SINCE_FORMS}", escape(when)));
    let w = when.trim();
    if let Some(unit) = w.chars().last().and_then(|c| match c {
        's' => Some(1),
        'm' => Some(60),
        'h' => Some(3600),
        'd' => Some(86_400),
        _ => None,
    }) {
        let n: i64 = w[..w.len() - 1]
            .parse()
            .ok()
            .filter(|n| (0..=100_000 * 86_400).contains(n))
            .ok_or_else(bad)?;
        return Ok(now - n * unit);
    }
    let clock = Clock {
        utc: clock.utc || w.ends_with('Z'),
        today: clock.today,
    };
    let w = w.strip_suffix('Z').unwrap_or(w);
    let (date, time) = match w.split_once(['T', ' ']) {
        Some((d, t)) => (Some(d), Some(t)),
        None if w.contains('-') => (Some(w), None),
        None => (None, Some(w)),
    };
    let (year, month, day) = match date {
        Some(d) => parse_date(d).ok_or_else(bad)?,
        None => {
            let c = clock.civil(now);
            (c.year, c.month, c.day)
        }
    };
    let (hour, minute, second) = time.map_or(Some((0, 0, 0)), parse_time).ok_or_else(bad)?;
    let c = Civil {
        year,
        month,
        day,
        hour,
        minute,
        second,
    };
    clock.epoch(c).ok_or_else(bad)
}

fn parse_date(d: &str) -> Option<(i32, u32, u32)> {
    let mut it = d.split('-');
    let (y, m, dd) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() || y.len() != 4 || m.len() != 2 || dd.len() != 2 {
        return None;
    }
    let (y, m, dd): (i32, u32, u32) = (y.parse().ok()?, m.parse().ok()?, dd.parse().ok()?);
    ((1..=12).contains(&m) && (1..=31).contains(&dd)).then_some((y, m, dd))
}

fn parse_time(t: &str) -> Option<(u32, u32, u32)> {
    let parts: Vec<&str> = t.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.len() != 2) {
        return None;
    }
    let num = |s: &str| s.parse::<u32>().ok();
    let (h, m) = (num(parts[0])?, num(parts[1])?);
    let s = parts.get(2).map_or(Some(0), |s| num(s))?;
    (h < 24 && m < 60 && s < 60).then_some((h, m, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_and_times() {
        let clock = Clock {
            utc: true,
            today: (2026, 12, 1),
        };
        assert_eq!(clock.stamp(1_795_975_520.5), "2026-11-29 18:05:20");
        let c = utc_civil(1_795_975_520);
        assert_eq!(utc_epoch(c), 1_795_975_520);
        assert_eq!(utc_civil(0).year, 1970);
        assert_eq!(utc_epoch(utc_civil(-86_401)), -86_401);
        let now = 1_795_975_520;
        assert_eq!(parse_since("10m", &clock, now).unwrap(), now - 600);
        assert_eq!(parse_since("2h", &clock, now).unwrap(), now - 7200);
        assert_eq!(parse_since("1d", &clock, now).unwrap(), now - 86_400);
        assert_eq!(parse_since("30s", &clock, now).unwrap(), now - 30);
        assert_eq!(
            parse_since("2026-11-29T18:05:20Z", &clock, now).unwrap(),
            1_795_975_520
        );
        assert_eq!(
            parse_since("2026-11-29 18:05", &clock, now).unwrap(),
            1_795_975_500
        );
        assert_eq!(
            parse_since("2026-11-29", &clock, now).unwrap(),
            1_795_910_400
        );
        assert_eq!(parse_since("18:05", &clock, now).unwrap(), 1_795_975_500);
        for bad in [
            "",
            "m",
            "-5m",
            "10x",
            "2026-13-01",
            "25:00",
            "2026-1-1",
            "yesterday",
        ] {
            let e = parse_since(bad, &clock, now).unwrap_err().to_string();
            assert!(e.contains("use an age"), "{bad}: {e}");
        }
    }
}
