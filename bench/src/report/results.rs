//! The run's results, and the numbers the report derives from them (the floors, the rates).

use crate::phases::{
    disk::Disk, node::NodeRound, parallel::Parallel, readiness::Ready, single::Single, thick::Thick,
};
use crate::stats::stats;
use crate::storm::Load;

pub(crate) struct Report {
    pub(crate) single: Single,
    pub(crate) disk: Vec<Disk>,
    pub(crate) thick: Vec<Thick>,
    pub(crate) parallel: Parallel,
    pub(crate) node: Vec<NodeRound>,
    pub(crate) ready: Ready,
    pub(crate) load: Load,
    pub(crate) sizes_kb: Vec<(String, f64)>,
    pub(crate) warmup: usize,
    pub(crate) workers: usize,
    pub(crate) load_start: String,
}

impl Report {
    /// The ADD's floor, ms: medians of an empty static program's start-up, the attachment's
    /// netlink work in-process (netns, sockets, operations) and the agent's three requests on
    /// one kept-alive connection, summed.
    pub(crate) fn floor(&self) -> f64 {
        let s = &self.single;
        stats(&s.empty).median + stats(&s.raw.add).median + stats(&s.agent).median
    }

    /// Agent requests of one ADD and of one DEL with the agent answering at once (medians).
    pub(crate) fn requests_per_call(&self) -> (f64, f64) {
        let s = &self.single;
        (stats(&s.requests_add).median, stats(&s.requests_del).median)
    }

    /// How many requests a call makes per second while it waits for its IP configuration: the
    /// readiness phase's requests beyond what the same ADDs and DELs make with the agent
    /// answering at once, over the time the ADDs spent between their registration and their
    /// return.
    pub(crate) fn waiting_rate(&self) -> f64 {
        let (add, del) = self.requests_per_call();
        let extra = self.ready.requests as f64 - self.ready.lag.n as f64 * (add + del);
        if self.ready.waiting_s > 0.0 {
            extra / self.ready.waiting_s
        } else {
            0.0
        }
    }
}

/// Half the plugin's poll period, ms: the mean wait from a ready moment to the next poll.
pub(crate) fn poll_half() -> f64 {
    contrail_k8s_cni::POLL_PERIOD.as_secs_f64() * 1000.0 / 2.0
}

/// Marginal ADD cost per added interface between consecutive thick sizes, ms.
pub(crate) fn marginals(t: &[Thick], pick: fn(&Thick) -> f64) -> Vec<(usize, usize, f64)> {
    t.windows(2)
        .map(|w| {
            (
                w[0].n,
                w[1].n,
                (pick(&w[1]) - pick(&w[0])) / (w[1].n - w[0].n) as f64,
            )
        })
        .collect()
}
