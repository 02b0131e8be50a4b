//! Error logs that a hostile client cannot turn into a flood: at most one line
//! per kind per interval, with the count of the ones folded into it.

use std::time::{Duration, Instant};

pub struct RateLog {
    interval: Duration,
    /// Per kind: when it was last logged and how many were held back since.
    last: Vec<(Option<Instant>, u64)>,
}

impl RateLog {
    pub fn new(kinds: usize, interval: Duration) -> RateLog {
        RateLog {
            interval,
            last: vec![(None, 0); kinds],
        }
    }

    /// `Some(suppressed)` if an event of `kind` at `now` should be logged
    /// (with the number held back since the last line), `None` to hold it back.
    pub fn admit(&mut self, kind: usize, now: Instant) -> Option<u64> {
        let (last, held) = self.last.get_mut(kind)?;
        match last {
            Some(t) if now.duration_since(*t) < self.interval => {
                *held += 1;
                None
            }
            _ => {
                *last = Some(now);
                Some(std::mem::take(held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_held_back() {
        let mut r = RateLog::new(2, Duration::from_secs(1));
        let t = Instant::now();
        assert_eq!(r.admit(0, t), Some(0));
        assert_eq!(r.admit(0, t + Duration::from_millis(10)), None);
        assert_eq!(r.admit(0, t + Duration::from_millis(20)), None);
        assert_eq!(r.admit(1, t), Some(0), "kinds are independent");
        assert_eq!(r.admit(0, t + Duration::from_secs(2)), Some(2));
    }
}
