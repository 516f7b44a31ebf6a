//! Latency samples and their percentiles.

use serde::Serialize;

/// Collected request latencies, in microseconds.
#[derive(Debug, Default, Clone)]
pub struct Latencies {
    samples: Vec<u64>,
}

/// Percentiles of a set of latencies, microseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub count: u64,
    /// Smallest.
    pub min: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
    /// Arithmetic mean.
    pub mean: u64,
}

impl Latencies {
    /// Record one sample.
    pub fn record(&mut self, micros: u64) {
        self.samples.push(micros);
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Percentiles by the nearest-rank method.
    pub fn summary(&self) -> Summary {
        if self.samples.is_empty() {
            return Summary::default();
        }
        let mut s = self.samples.clone();
        s.sort_unstable();
        let rank = |p: u64| {
            let n = s.len() as u64;
            let r = (p * n).div_ceil(100).max(1);
            s[(r - 1) as usize]
        };
        Summary {
            count: s.len() as u64,
            min: s[0],
            p50: rank(50),
            p90: rank(90),
            p99: rank(99),
            max: s[s.len() - 1],
            mean: s.iter().sum::<u64>() / s.len() as u64,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut l = Latencies::default();
        for v in (1..=100).rev() {
            l.record(v);
        }
        let s = l.summary();
        assert_eq!(
            (s.count, s.min, s.p50, s.p90, s.p99, s.max, s.mean),
            (100, 1, 50, 90, 99, 100, 50)
        );
        assert_eq!(Latencies::default().summary(), Summary::default());
        let mut one = Latencies::default();
        one.record(7);
        assert_eq!(one.summary().p99, 7);
    }
}
