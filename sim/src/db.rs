//! The agent's DB exclusion (`--exclusion`): what a request costs the node's agent.
//!
//! In the agent every REST request runs as an `http::RequestHandlerTask`, and the task policy
//! makes the `db::DBTable` tasks exclude it (`cmn/agent.cc`, `Agent::SetAgentTaskPolicy`): while
//! a request is answered, no config work runs, and the other way round. The config work is what
//! turns a registered port into an interface entry with an IP configuration. So the model is one
//! lock, taken first come, first served, by two kinds of jobs:
//! - each request holds it for `request` (default 0.25 ms), and is answered as the agent's
//!   state stood when its turn came;
//! - each VMI needs `work` of it (default 2 ms) once its controller delay (`ip-delay-ms`) is over;
//!   its IP configuration exists from the end of that work.
//!
//! The schedule is computed, not slept through: jobs are placed in the order they arrive, a
//! request's answer waits until its job's end, and the work that fell due before a request's
//! arrival is placed before it. Without `--exclusion` both costs are zero: every job takes its
//! turn at once, and an IP configuration exists from the end of its controller delay, as before.
//!
//! It reports per second (`GET /sim/load`): requests by kind, the DB time requests and work
//! took, the longest queue a request met, and for each VMI's work how long it queued and how
//! much of that the requests ahead of it caused.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Value, json};

/// The costs of the model, in nanoseconds.
#[derive(Clone, Copy)]
pub struct Costs {
    pub request: u64,
    pub work: u64,
}

/// A job placed in the schedule.
#[derive(Clone, Copy)]
struct Job {
    start: u64,
    end: u64,
    request: bool,
}

/// One second of the schedule, by arrival.
#[derive(Default)]
struct Second {
    requests: BTreeMap<String, u64>,
    request_ns: u64,
    work_ns: u64,
    /// The longest a request arriving in this second waited for its turn.
    queue_peak_ns: u64,
}

/// One VMI's work, once placed.
struct Work {
    vmi: String,
    queued: u64,
    by_requests: u64,
}

pub struct Db {
    costs: Costs,
    /// When the schedule started (the simulator's start): second 0.
    origin: u64,
    /// When the last placed job ends.
    busy_until: u64,
    /// Work not placed yet: (due, VMI).
    pending: BTreeSet<(u64, String)>,
    /// Placed jobs that may still overlap work placed later: what its queueing is blamed on.
    recent: VecDeque<Job>,
    seconds: Vec<Second>,
    work: Vec<Work>,
}

impl Db {
    pub fn new(costs: Costs, origin: u64) -> Db {
        Db {
            costs,
            origin,
            busy_until: origin,
            pending: BTreeSet::new(),
            recent: VecDeque::new(),
            seconds: Vec::new(),
            work: Vec::new(),
        }
    }

    fn second(&mut self, at: u64) -> &mut Second {
        let i = usize::try_from(at.saturating_sub(self.origin) / 1_000_000_000).unwrap_or(0);
        if self.seconds.len() <= i {
            self.seconds.resize_with(i + 1, Second::default);
        }
        &mut self.seconds[i]
    }

    /// A VMI's config work falls due at `due` (its controller delay after its registration, or
    /// after the agent first heard of a nested pod).
    pub fn due(&mut self, vmi: &str, due: u64) {
        self.pending.insert((due, vmi.to_string()));
    }

    /// Forgets a VMI's work not placed yet (its registration was dropped).
    pub fn cancel(&mut self, vmi: &str) {
        self.pending.retain(|(_, v)| v != vmi);
    }

    /// Places the work due by `now`, in the order it fell due; calls `ready(vmi, end)` for each,
    /// with the moment its IP configuration exists.
    pub fn place_until(&mut self, now: u64, mut ready: impl FnMut(&str, u64)) {
        while let Some((due, vmi)) = self.pending.first().cloned() {
            if due > now {
                break;
            }
            self.pending.pop_first();
            let start = due.max(self.busy_until);
            let end = start + self.costs.work;
            let by_requests = self
                .recent
                .iter()
                .filter(|j| j.request)
                .map(|j| j.end.min(start).saturating_sub(j.start.max(due)))
                .sum();
            self.place(Job {
                start,
                end,
                request: false,
            });
            self.second(start).work_ns += self.costs.work;
            self.work.push(Work {
                vmi: vmi.clone(),
                queued: start - due,
                by_requests,
            });
            ready(&vmi, end);
        }
    }

    fn place(&mut self, job: Job) {
        self.busy_until = job.end;
        self.recent.push_back(job);
    }

    /// A request arriving at `now` (after [`Db::place_until`] for `now`): its turn, from its
    /// start to its end.
    pub fn request(&mut self, now: u64) -> (u64, u64) {
        // Later work falls due after `now`: jobs that ended by then cannot delay it.
        while self.recent.front().is_some_and(|j| j.end <= now) {
            self.recent.pop_front();
        }
        let start = now.max(self.busy_until);
        let end = start + self.costs.request;
        self.place(Job {
            start,
            end,
            request: true,
        });
        let request_ns = self.costs.request;
        let second = self.second(now);
        second.request_ns += request_ns;
        second.queue_peak_ns = second.queue_peak_ns.max(start - now);
        (start, end)
    }

    /// Counts an answered request under its kind, in the second it arrived.
    pub fn tally(&mut self, arrived: u64, kind: &str) {
        *self
            .second(arrived)
            .requests
            .entry(kind.to_string())
            .or_default() += 1;
    }

    /// `GET /sim/load`.
    pub fn load(&self) -> Value {
        let ms = |ns: u64| ns as f64 / 1e6;
        let seconds: Vec<Value> = self
            .seconds
            .iter()
            .enumerate()
            .map(|(i, s)| {
                json!({
                    "second": i,
                    "requests": s.requests,
                    "db-requests-ms": ms(s.request_ns),
                    "db-work-ms": ms(s.work_ns),
                    "queue-peak-ms": ms(s.queue_peak_ns),
                })
            })
            .collect();
        let work: Vec<Value> = self
            .work
            .iter()
            .map(|w| {
                json!({"vmi": w.vmi, "queued-ms": ms(w.queued), "by-requests-ms": ms(w.by_requests)})
            })
            .collect();
        json!({
            "request-us": self.costs.request / 1000,
            "vmi-us": self.costs.work / 1000,
            "seconds": seconds,
            "work": work,
        })
    }
}
