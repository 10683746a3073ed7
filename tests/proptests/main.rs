//! Property-based tests of every parser of untrusted input.
//!
//! These stand in for `cargo fuzz`, which needs a nightly toolchain: arbitrary bytes, arbitrary
//! JSON, and structurally plausible inputs with hostile values go through the network config
//! parser, CNI_ARGS, the CNI_* environment and the agent's two answers, and the VMI resolver
//! is exercised over generated pods. Every property is bounded (a few hundred cases) so that
//! the module runs in seconds; `PROPTEST_CASES` raises the count for a longer soak.
//!
//! Failures are not persisted (no `proptest-regressions/` next to the sources): a failing case
//! is printed, shrunk, by the runner.
//!
//! One module per area: `netconf` (the network config), `cni` (`CNI_ARGS` and the `CNI_*`
//! environment), `ifnames` (interface names, ours and the runtime's), `agent` (the agent's
//! answers), `resolve` (the VMI resolver); `strategies` holds the generators they share.

mod agent;
mod cni;
mod ifnames;
mod netconf;
mod resolve;
mod strategies;

use proptest::prelude::*;

/// `cases` per property, unless `PROPTEST_CASES` asks for more (a soak).
fn config(cases: u32) -> ProptestConfig {
    let soak = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    ProptestConfig {
        cases: soak.map_or(cases, |n| n.max(cases)),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}
