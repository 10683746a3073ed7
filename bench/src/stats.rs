//! Summary statistics and the fixed-seed random numbers of the runs.

#[derive(Clone, Copy, Default)]
pub(crate) struct Stats {
    pub(crate) n: usize,
    pub(crate) median: f64,
    pub(crate) p95: f64,
    pub(crate) p99: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

pub(crate) fn stats(v: &[f64]) -> Stats {
    if v.is_empty() {
        return Stats::default();
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    // Nearest rank.
    let rank = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    let median = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    Stats {
        n: s.len(),
        median,
        p95: rank(0.95),
        p99: rank(0.99),
        min: s[0],
        max: s[s.len() - 1],
    }
}

/// Deterministic delays: the same run-to-run (xorshift64*, fixed seed).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n
    }
}

/// A median with its distribution-free confidence interval: between two order statistics of
/// the sample, chosen from the binomial(n, 1/2) distribution of how many values fall below the
/// true median (no assumption about the distribution itself).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Interval {
    pub(crate) n: usize,
    pub(crate) median: f64,
    pub(crate) low: f64,
    pub(crate) high: f64,
    /// The interval's coverage, at least [`COVERAGE`] (the order statistics make it discrete).
    pub(crate) coverage: f64,
}

/// The coverage asked of an [`Interval`].
pub(crate) const COVERAGE: f64 = 0.95;

/// The median of `v` and its interval of at least [`COVERAGE`]; `None` when `v` is too small
/// to have one (fewer than 6 values: even min to max covers less).
pub(crate) fn median_interval(v: &[f64]) -> Option<Interval> {
    use statrs::distribution::{Binomial, DiscreteCDF};
    let n = v.len();
    let below = Binomial::new(0.5, n as u64).ok()?;
    // The largest k with P(B <= k - 1) <= (1 - COVERAGE) / 2: [x(k), x(n + 1 - k)].
    let tail = (1.0 - COVERAGE) / 2.0;
    let k = (1..=n / 2)
        .take_while(|&k| below.cdf(k as u64 - 1) <= tail)
        .last()?;
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(Interval {
        n,
        median: stats(v).median,
        low: s[k - 1],
        high: s[n - k],
        coverage: 1.0 - 2.0 * below.cdf(k as u64 - 1),
    })
}

/// `a[i] - factor * b[i]` for each pair of measurements of one iteration.
pub(crate) fn paired(a: &[f64], b: &[f64], factor: f64) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| a - factor * b).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_the_textbook_one() {
        // n = 6: min to max, coverage 1 - 2/64.
        let six: Vec<f64> = (1..=6).map(f64::from).collect();
        let i = median_interval(&six).unwrap();
        assert_eq!((i.low, i.high), (1.0, 6.0));
        assert!((i.coverage - (1.0 - 2.0 / 64.0)).abs() < 1e-12);
        assert!(median_interval(&six[..5]).is_none());
        // n = 100: the 40th and 61st values (Conover's table), coverage 0.9648.
        let hundred: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let i = median_interval(&hundred).unwrap();
        assert_eq!((i.low, i.high, i.median), (40.0, 61.0, 50.5));
        assert!((i.coverage - 0.9648).abs() < 1e-3, "{}", i.coverage);
    }

    #[test]
    fn pairs_are_taken_per_iteration() {
        assert_eq!(paired(&[3.0, 5.0], &[2.0, 4.0], 0.5), [2.0, 3.0]);
    }
}
