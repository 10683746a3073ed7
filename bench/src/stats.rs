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
