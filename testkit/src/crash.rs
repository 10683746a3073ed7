//! Crash points and seeds: the steps of ADD and DEL a crash-points build stops at, and the
//! seeded randomness of the tests that crash them.

use crate::bins::uuid;

/// The crash points of ADD, in order (`crash::Step` in src/crash.rs; a crash-points build
/// refuses a name that is no step, so a name here that went stale fails its test): the pod's
/// lock taken, nothing of the pod read or written yet (the first step of every call that opens
/// the pod: a DEL's, a CHECK's too), the claim's file written but not yet renamed into place,
/// the claim, the veth, the registration, the wait for the IP configuration (after a first
/// 404), the IP configuration received, the addresses and routes.
pub const ADD_STEPS: [&str; 8] = [
    "locked",
    "renaming",
    "claimed",
    "veth",
    "registered",
    "waiting",
    "ip",
    "addressed",
];

/// The crash points of DEL (and of GC, which releases the same way): the interfaces gone, the
/// released files renamed to their pending names, the pod's ports dropped by the agent (before
/// the attachments that stay are registered again).
pub const DEL_STEPS: [&str; 3] = ["unlinked", "marked", "deregistered"];

/// SplitMix64: small, and the same sequence for a seed on every machine.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub fn uuid(&mut self) -> String {
        uuid_of(u128::from(self.next_u64()) << 64 | u128::from(self.next_u64()))
    }
}

/// The uuid spelling of a number (8-4-4-4-12 lower-case hex digits).
pub fn uuid_of(n: u128) -> String {
    let h = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Runs `case` for `cases` fresh seeds, or for the one seed in the environment variable `var`
/// (on shard 0 only); a failure prints its seed and how to replay it, with `describe(seed)`.
pub fn for_each_seed(
    var: &str,
    test: &str,
    cases: u64,
    shard: u64,
    describe: impl Fn(u64) -> String,
    case: impl Fn(u64),
) {
    let seeds: Vec<u64> = match std::env::var(var) {
        Ok(s) if shard == 0 => vec![
            s.parse()
                .unwrap_or_else(|_| panic!("{var} must be a number")),
        ],
        Ok(_) => vec![],
        Err(_) => {
            let base = u64::from_str_radix(&uuid().replace('-', "")[..16], 16).unwrap();
            (0..cases).map(|i| base.wrapping_add(i)).collect()
        }
    };
    for seed in seeds {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(seed)));
        if let Err(e) = outcome {
            eprintln!(
                "seed {seed} failed: {}\nreplay: {var}={seed} cargo nextest run --release {test}",
                describe(seed)
            );
            std::panic::resume_unwind(e);
        }
    }
}
