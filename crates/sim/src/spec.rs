//! The workload's distributions and how they are written on the command line.

use crate::rng::Rng;
use crate::Nanos;
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("bad delay {0:?}: expected a number of µs, fixed:US, uniform:LO:HI or exp:MEAN")]
    Delay(String),
    #[error("bad size distribution {0:?}: expected single, uniform, multi or FRAGS:WEIGHT,…")]
    Sizes(String),
    #[error("bad list {0:?}: expected numbers separated by {1:?}")]
    List(String, char),
}

/// A delay in µs, drawn afresh each time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Delay {
    Fixed(f64),
    Uniform(f64, f64),
    /// Exponential with this mean.
    Exp(f64),
}

impl Delay {
    pub fn sample(&self, rng: &mut Rng) -> Nanos {
        let us = match *self {
            Delay::Fixed(v) => v,
            Delay::Uniform(lo, hi) => lo + (hi - lo) * rng.f64(),
            Delay::Exp(mean) => -mean * (1.0 - rng.f64()).ln(),
        };
        (us * 1000.0).round().max(0.0) as Nanos
    }

    pub fn mean_us(&self) -> f64 {
        match *self {
            Delay::Fixed(v) | Delay::Exp(v) => v,
            Delay::Uniform(lo, hi) => (lo + hi) / 2.0,
        }
    }
}

impl FromStr for Delay {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Delay, SpecError> {
        let err = || SpecError::Delay(s.to_owned());
        let nums: Vec<f64> = s
            .split(':')
            .skip(usize::from(s.contains(':')))
            .map(|p| p.trim().parse::<f64>().map_err(|_| err()))
            .collect::<Result<_, _>>()?;
        let kind = s.split(':').next().unwrap_or_default();
        let d = match (kind, nums.as_slice()) {
            (_, [v]) if !s.contains(':') => Delay::Fixed(*v),
            ("fixed", [v]) => Delay::Fixed(*v),
            ("uniform", [lo, hi]) if lo <= hi => Delay::Uniform(*lo, *hi),
            ("exp", [m]) => Delay::Exp(*m),
            _ => return Err(err()),
        };
        let ok = match d {
            Delay::Fixed(v) | Delay::Exp(v) => v.is_finite() && v >= 0.0,
            Delay::Uniform(lo, hi) => lo.is_finite() && hi.is_finite() && lo >= 0.0,
        };
        if ok {
            Ok(d)
        } else {
            Err(err())
        }
    }
}

/// Request sizes in fragments with their weights (Appendix B's three, or any).
#[derive(Debug, Clone, PartialEq)]
pub struct SizeDist {
    pub frags: Vec<u32>,
    cumulative: Vec<f64>,
}

impl SizeDist {
    pub fn new(pairs: &[(u32, f64)]) -> Result<SizeDist, SpecError> {
        let bad = || SpecError::Sizes(format!("{pairs:?}"));
        if pairs.is_empty() || pairs.iter().any(|&(f, w)| f == 0 || w.is_nan() || w < 0.0) {
            return Err(bad());
        }
        let mut acc = 0.0;
        let cumulative: Vec<f64> = pairs
            .iter()
            .map(|&(_, w)| {
                acc += w;
                acc
            })
            .collect();
        if acc <= 0.0 {
            return Err(bad());
        }
        Ok(SizeDist {
            frags: pairs.iter().map(|&(f, _)| f).collect(),
            cumulative,
        })
    }

    pub fn sample(&self, rng: &mut Rng) -> u32 {
        self.frags[rng.pick(&self.cumulative)]
    }
}

impl FromStr for SizeDist {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<SizeDist, SpecError> {
        let pairs: Vec<(u32, f64)> = match s {
            "single" => vec![(1, 95.0), (2, 3.0), (4, 1.0), (8, 1.0)],
            "uniform" => vec![(1, 25.0), (2, 25.0), (4, 25.0), (8, 25.0)],
            "multi" => vec![(1, 10.0), (2, 30.0), (4, 30.0), (8, 30.0)],
            _ => s
                .split(',')
                .map(|p| {
                    let (f, w) = p.split_once(':').unwrap_or((p, "1"));
                    Some((f.trim().parse().ok()?, w.trim().parse().ok()?))
                })
                .collect::<Option<_>>()
                .ok_or_else(|| SpecError::Sizes(s.to_owned()))?,
        };
        SizeDist::new(&pairs).map_err(|_| SpecError::Sizes(s.to_owned()))
    }
}

/// Parse `a<sep>b<sep>c` into numbers.
pub fn parse_list<T: FromStr>(s: &str, sep: char) -> Result<Vec<T>, SpecError> {
    s.split(sep)
        .map(|p| p.trim().parse::<T>().ok())
        .collect::<Option<Vec<T>>>()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| SpecError::List(s.to_owned(), sep))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_parse() {
        assert_eq!("10".parse(), Ok(Delay::Fixed(10.0)));
        assert_eq!("fixed:3".parse(), Ok(Delay::Fixed(3.0)));
        assert_eq!("uniform:5:15".parse(), Ok(Delay::Uniform(5.0, 15.0)));
        assert_eq!("exp:2.5".parse(), Ok(Delay::Exp(2.5)));
        assert!("uniform:15:5".parse::<Delay>().is_err());
        assert!("gauss:1".parse::<Delay>().is_err());
    }

    #[test]
    fn sizes_parse() {
        let d: SizeDist = "multi".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.frags, vec![1, 2, 4, 8]);
        let d: SizeDist = "3:1,16:2".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.frags, vec![3, 16]);
        assert!("0:1".parse::<SizeDist>().is_err());
        assert!("x".parse::<SizeDist>().is_err());
    }
}
