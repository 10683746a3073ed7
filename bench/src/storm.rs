//! Section 9: the node, not one call. The agent's DB exclusion on (the simulator's
//! `--exclusion`: each request holds the agent's DB for 0.25 ms, each VMI's config work 2 ms),
//! polling policies side by side:
//! - this build: the node's request budget (`agent-requests-per-second`, default 200), also
//!   with every core kept busy (Debian's stress-ng);
//! - the build before issue 38 (scripts/bench builds it from git): the same budget, every
//!   request but registrations and DELs queued behind the polls;
//! - the build before the budget (scripts/bench builds it from git): a poll every 21 ms per
//!   waiting call, whatever else waits;
//! - a model of the legacy Go CNI's requests: `GET /vm-cfg`, `POST /vm`, then `GET
//!   /vm/<vm>/<vmi>` at once and every `poll-timeout` (3 s) until it answers; its DEL one
//!   `DELETE /vm/<vm>`. Only its requests: it makes no interfaces.
//!
//! Two scenarios each: the storm (a node that reboots or rolls out: 110 pods x 4 attachments
//! ADDed at once, each pod's in Multus's order, IP configurations 2-5 s after registration),
//! then its DELs; and the quiet node (one pod, its IP configuration 300 ms after registration):
//! how long after the IP configuration exists does the ADD return.

mod legacy;

use crate::context::{Ctx, NODE_ATTACHMENTS, check_interrupt, node_in, stdin_conf};
use crate::error::R;
use crate::measure::{CniEnv, expect_del, instant_of, ms};
use crate::phases::checks::{check_attached, check_nothing_left, registered_vmis};
use crate::stats::{Rng, Stats, stats};
use crate::storm::legacy::{Done, Legacy};

use contrail_testkit::{Netns, PodSpec, Sim, VmiSpec};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

/// The storm's IP configurations come this long after their registrations: uniform in
/// [`STORM_IP_DELAY_MS`].
pub(crate) const STORM_IP_DELAY_MS: (u64, u64) = (2000, 5000);
/// The quiet node's pod gets its IP configuration this long after its registration.
pub(crate) const QUIET_IP_DELAY_MS: u64 = 300;

/// Which polling policy: section 9's columns.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    This,
    /// This build with every core kept busy.
    ThisBusy,
    /// The build before issue 38.
    Before,
    /// The build before the node's request budget.
    FixedPeriod,
    Legacy,
}

impl Role {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::This => "this build: the node's request budget",
            Role::ThisBusy => "this build, every core kept busy",
            Role::Before => "before: every request but registrations behind the polls",
            Role::FixedPeriod => "before the budget: a poll every 21 ms per call",
            Role::Legacy => "legacy Go CNI (model): one poll per 3 s",
        }
    }
}

/// A polling policy: a build of the plugin (`bin`), or the legacy model (`None`).
#[derive(Clone, Copy)]
pub(crate) struct Policy<'a> {
    pub(crate) role: Role,
    pub(crate) bin: Option<&'a Path>,
}

impl Policy<'_> {
    pub(crate) fn name(&self) -> &'static str {
        self.role.name()
    }

    /// A short name for its files.
    fn tag(&self) -> String {
        let name = self.name().split(':').next().unwrap_or("x");
        name.replace([' ', ','], "-")
    }
}

/// Every core kept busy (Debian's stress-ng, one CPU hog per core) while it lives.
struct Hogs(std::process::Child);

impl Hogs {
    fn start() -> R<Hogs> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        std::process::Command::new("stress-ng")
            .args(["--cpu", &cores.to_string(), "--quiet"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(Hogs)
            .map_err(|e| format!("stress-ng (scripts/bench installs it): {e}"))
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        // stress-ng's workers follow their parent's SIGTERM.
        // SAFETY: kill(2) on the child's pid, which has not been reaped yet.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// What the storm did to the node, for one policy.
pub(crate) struct Storm {
    pub(crate) role: Role,
    pub(crate) pods: usize,
    /// Requests the agent received during the ADDs: in all, the busiest second, the mean
    /// second (from the first to the last second with requests), by kind.
    pub(crate) requests: u64,
    pub(crate) peak: u64,
    pub(crate) mean: f64,
    pub(crate) by_kind: BTreeMap<String, u64>,
    /// The share of the agent's time its DB was held by requests during the ADDs.
    pub(crate) db_share: f64,
    /// Per VMI, ms: how long its config work queued for the DB in all, and the part of that
    /// the requests ahead of it caused.
    pub(crate) queued: Stats,
    pub(crate) by_requests: Stats,
    /// Per ADD, ms: its time beyond its VMI's IP delay; that time split at its registration:
    /// from the call's start to the registration, and from the registration to the call's
    /// end, the IP delay taken off.
    pub(crate) beyond: Stats,
    pub(crate) before_reg: Stats,
    pub(crate) after_reg: Stats,
    /// The most requests the agent received in any one second (sliding, from each request's
    /// arrival), the ADDs' and the DELs'.
    pub(crate) sliding_peak: u64,
    /// From the storm's start until the last pod had all its interfaces, s.
    pub(crate) whole_s: f64,
    /// Requests of the DELs, in all and by kind.
    pub(crate) del_requests: u64,
    pub(crate) del_by_kind: BTreeMap<String, u64>,
    pub(crate) failures: Vec<String>,
    pub(crate) problems: Vec<String>,
}

/// Section 9's results: one storm per policy and the quiet node per policy for the tables, and
/// for the storm's paired row, the time until every pod was whole (s) of this build and of
/// the build with a poll every 21 ms, storm after storm, one pair after the other.
pub(crate) struct Load {
    pub(crate) storms: Vec<Storm>,
    pub(crate) quiets: Vec<Quiet>,
    pub(crate) pairs: Vec<(f64, f64)>,
}

/// The quiet node, for one policy.
pub(crate) struct Quiet {
    pub(crate) role: Role,
    /// From the moment the IP configuration exists to the ADD's return, ms.
    pub(crate) lag: Stats,
    /// Requests of one ADD (median).
    pub(crate) requests: f64,
}

/// The storm's pods: `NODE_ATTACHMENTS` each, every VMI with its IP configuration at a random
/// moment in [`STORM_IP_DELAY_MS`] after its registration and a MAC of its own.
pub(crate) fn storm_pods(n: usize, rng: &mut Rng) -> Vec<PodSpec> {
    let (lo, hi) = STORM_IP_DELAY_MS;
    (0..n)
        .map(|i| {
            let vmis = NODE_ATTACHMENTS
                .iter()
                .enumerate()
                .map(|(k, (_, network, _))| {
                    let mut v = VmiSpec::new(network, k as u8 + 1)
                        .with("ip-delay-ms", json!(lo + rng.below(hi - lo)));
                    v.mac = format!("02:fd:{:02x}:{:02x}:00:{:02x}", i >> 8, i & 0xff, k + 1);
                    v
                })
                .collect();
            PodSpec {
                namespace: "default".into(),
                name: format!("storm-{i}"),
                ..PodSpec::new(vmis)
            }
        })
        .collect()
}

/// The quiet node's pod.
pub(crate) fn quiet_pod() -> PodSpec {
    PodSpec {
        namespace: "default".into(),
        name: "quiet".into(),
        ..PodSpec::new(vec![
            VmiSpec::new("default", 1).with("ip-delay-ms", json!(QUIET_IP_DELAY_MS)),
        ])
    }
}

fn ip_delay(v: &VmiSpec) -> f64 {
    v.extra["ip-delay-ms"].as_u64().unwrap_or(0) as f64
}

/// A simulator for `pods` with the agent's DB exclusion modelled, logging each request's
/// arrival.
fn agent(cx: &Ctx, pods: &[PodSpec]) -> Sim {
    Sim::start_with(
        &cx.opts.sim,
        &pods.iter().collect::<Vec<_>>(),
        &["--exclusion", "--log-requests"],
    )
}

/// The most of `arrivals` (ns, any order) within any one second.
fn busiest_second(mut arrivals: Vec<u64>) -> u64 {
    arrivals.sort_unstable();
    let mut first = 0;
    let mut most = 0;
    for (last, &t) in arrivals.iter().enumerate() {
        while t - arrivals[first] >= 1_000_000_000 {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most as u64
}

/// When each VMI was registered (the simulator's `sim-registered-ns`), by its uuid.
fn registrations(sim: &Sim) -> BTreeMap<String, Instant> {
    sim.get("/sim/ports")
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let vmi = p["vmi-uuid"].as_str().or(p["id"].as_str())?;
            Some((
                vmi.to_string(),
                instant_of(p["sim-registered-ns"].as_u64()?),
            ))
        })
        .collect()
}

/// Requests by kind ("METHOD route status").
fn by_kind(sim: &Sim) -> R<BTreeMap<String, u64>> {
    serde_json::from_value(sim.get("/sim/requests"))
        .map_err(|e| format!("the simulator's GET /sim/requests: {e}"))
}

/// The storm and its DELs under `policy`, on the pods' namespaces `nss`.
pub(crate) fn storm(cx: &Ctx, policy: Policy, pods: &[PodSpec], nss: &[Netns]) -> R<Storm> {
    check_interrupt()?;
    let sim = agent(cx, pods);
    let state = cx.ext4.dir.join(format!("storm-{}", policy.tag()));
    let node = node_in(&sim, &state);
    let confs: Vec<PathBuf> = NODE_ATTACHMENTS
        .iter()
        .map(|(_, _, name)| stdin_conf(&cx.dir.0, &node, name))
        .collect::<R<_>>()?;
    let sandboxes: Vec<CniEnv> = pods
        .iter()
        .zip(nss)
        .map(|(p, ns)| cx.env(&node, "ADD", ns, &p.name))
        .collect();
    eprintln!("  {}: ADD", policy.name());
    let hogs = match policy.role {
        Role::ThisBusy => Some(Hogs::start()?),
        _ => None,
    };
    let started = Instant::now();
    let adds = wave(cx, policy, &sim, pods, &sandboxes, "ADD", &confs)?;
    let load = sim.get("/sim/load");
    let add_kinds = by_kind(&sim)?;
    let registered = registrations(&sim);
    let mut problems = Vec::new();
    if policy.bin.is_some() {
        problems.extend(check_attached(&sim, pods, nss)?);
    }
    eprintln!("  {}: DEL", policy.name());
    let dels = wave(cx, policy, &sim, pods, &sandboxes, "DEL", &confs)?;
    drop(hogs);
    let arrivals: Vec<u64> = sim
        .get("/sim/log")
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| !r["path"].as_str().unwrap_or("").starts_with("/sim/"))
        .filter_map(|r| r["arrived-ns"].as_u64())
        .collect();
    let mut del_by_kind = by_kind(&sim)?;
    for (kind, n) in del_by_kind.iter_mut() {
        *n -= add_kinds.get(kind).copied().unwrap_or(0);
    }
    del_by_kind.retain(|_, n| *n > 0);
    match policy.bin {
        Some(_) => problems.extend(check_nothing_left(&sim, pods, nss, &state)?),
        None => {
            let left = registered_vmis(&sim).len();
            if left > 0 {
                problems.push(format!("{left} VMIs still registered"));
            }
        }
    }
    let mut failures = Vec::new();
    for (calls, command) in [(&adds, "ADD"), (&dels, "DEL")] {
        for (pod, calls) in pods.iter().zip(calls) {
            for (done, (ifname, _, _)) in calls.iter().zip(NODE_ATTACHMENTS) {
                if !done.ok {
                    failures.push(format!("{command} {} {ifname}: {}", pod.name, done.said));
                }
            }
            if calls.len() < NODE_ATTACHMENTS.len() {
                failures.push(format!("{command} {}: stopped after a failure", pod.name));
            }
        }
    }
    // Per second, from the simulator's start: the storm's own seconds are those with requests.
    let seconds = load["seconds"].as_array().cloned().unwrap_or_default();
    let per_second: Vec<u64> = seconds
        .iter()
        .map(|s| {
            s["requests"]
                .as_object()
                .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
        })
        .collect();
    let busy: Vec<u64> = {
        let first = per_second.iter().position(|&n| n > 0).unwrap_or(0);
        let last = per_second.iter().rposition(|&n| n > 0).unwrap_or(0);
        per_second[first..=last.max(first)].to_vec()
    };
    let requests: u64 = add_kinds.values().sum();
    let held_ms: f64 = seconds
        .iter()
        .filter_map(|s| s["db-requests-ms"].as_f64())
        .sum();
    let add_span = adds
        .iter()
        .flatten()
        .map(|d| d.end)
        .max()
        .map_or(0.0, |end| ms(end - started));
    let work = load["work"].as_array().cloned().unwrap_or_default();
    let work_ms = |key: &str| -> Vec<f64> { work.iter().filter_map(|w| w[key].as_f64()).collect() };
    let beyond: Vec<f64> = pods
        .iter()
        .zip(&adds)
        .flat_map(|(pod, calls)| {
            calls
                .iter()
                .zip(&pod.vmis)
                .map(|(d, v)| ms(d.end - d.start) - ip_delay(v))
        })
        .collect();
    // (Before, after) the registration, for the ADDs that registered.
    let split: Vec<(f64, f64)> = pods
        .iter()
        .zip(&adds)
        .flat_map(|(pod, calls)| {
            calls.iter().zip(&pod.vmis).filter_map(|(d, v)| {
                let at = *registered.get(&v.uuid)?;
                Some((ms(at - d.start), ms(d.end - at) - ip_delay(v)))
            })
        })
        .collect();
    let whole = adds
        .iter()
        .filter_map(|calls| calls.last().map(|d| d.end))
        .max()
        .map_or(0.0, |end| (end - started).as_secs_f64());
    Ok(Storm {
        role: policy.role,
        pods: pods.len(),
        requests,
        peak: busy.iter().copied().max().unwrap_or(0),
        mean: requests as f64 / busy.len().max(1) as f64,
        by_kind: add_kinds,
        db_share: held_ms / add_span.max(1.0),
        queued: stats(&work_ms("queued-ms")),
        by_requests: stats(&work_ms("by-requests-ms")),
        beyond: stats(&beyond),
        before_reg: stats(&split.iter().map(|s| s.0).collect::<Vec<_>>()),
        after_reg: stats(&split.iter().map(|s| s.1).collect::<Vec<_>>()),
        sliding_peak: busiest_second(arrivals),
        whole_s: whole,
        del_requests: del_by_kind.values().sum(),
        del_by_kind,
        failures,
        problems,
    })
}

/// `command` for every attachment of every pod (ADD in `NODE_ATTACHMENTS` order, DEL in
/// reverse), the pods at once, each pod's calls one after the other as Multus makes them: the
/// calls of each pod, in `NODE_ATTACHMENTS` order.
fn wave(
    cx: &Ctx,
    policy: Policy,
    sim: &Sim,
    pods: &[PodSpec],
    sandboxes: &[CniEnv],
    command: &'static str,
    confs: &[PathBuf],
) -> R<Vec<Vec<Done>>> {
    let barrier = Barrier::new(pods.len());
    let mut order: Vec<usize> = (0..NODE_ATTACHMENTS.len()).collect();
    if command == "DEL" {
        order.reverse();
    }
    let order = &order;
    std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .zip(sandboxes)
            .enumerate()
            .map(|(i, (pod, sandbox))| {
                let barrier = &barrier;
                s.spawn(move || -> R<Vec<Done>> {
                    let scratch = cx.scratch(&format!("storm{i}"));
                    let sandbox = sandbox.with(command);
                    let mut legacy = Legacy::new(sim, pod, &sandbox);
                    barrier.wait();
                    let mut done = Vec::new();
                    for &k in order {
                        let env = sandbox.on(NODE_ATTACHMENTS[k].0);
                        let d = match policy.bin {
                            Some(bin) => {
                                let c = env.run(bin, &confs[k], &scratch)?;
                                Done {
                                    start: c.start,
                                    end: c.end,
                                    ok: c.ok,
                                    said: c.describe(),
                                }
                            }
                            None => legacy.call(command, k),
                        };
                        let failed = !d.ok;
                        done.push(d);
                        // Multus stops a pod's ADDs at a failure and goes on with its DELs.
                        if failed && command == "ADD" {
                            break;
                        }
                    }
                    // Back in attachment order.
                    if command == "DEL" {
                        done.reverse();
                    }
                    Ok(done)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "thread panicked".to_string())?)
            .collect()
    })
}

/// The quiet node under `policy`: `samples` ADDs (and DELs) of one pod in a row.
pub(crate) fn quiet(cx: &Ctx, policy: Policy, samples: usize) -> R<Quiet> {
    check_interrupt()?;
    let pod = quiet_pod();
    let sim = agent(cx, std::slice::from_ref(&pod));
    let state = cx.ext4.dir.join(format!("quiet-{}", policy.tag()));
    let node = node_in(&sim, &state);
    let conf = stdin_conf(&cx.dir.0, &node, "contrail-k8s-cni")?;
    let ns = Netns::new();
    let scratch = cx.scratch("quiet");
    let mut lags = Vec::new();
    let mut requests = Vec::new();
    for _ in 0..samples {
        check_interrupt()?;
        let env = cx.env(&node, "ADD", &ns, &pod.name);
        let before = cx_requests(&sim)?;
        let (end, ok, said) = match policy.bin {
            Some(bin) => {
                let c = env.run(bin, &conf, &scratch)?;
                (c.end, c.ok, c.describe())
            }
            None => {
                let mut legacy = Legacy::new(&sim, &pod, &env);
                let d = legacy.call("ADD", 0);
                (d.end, d.ok, String::new())
            }
        };
        if !ok {
            return Err(format!("quiet node, {}: ADD failed: {said}", policy.name()));
        }
        requests.push((cx_requests(&sim)? - before) as f64);
        let ports = sim.get("/sim/ports");
        let ready = ports
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["vmi-uuid"] == pod.vmis[0].uuid.as_str())
            .and_then(|p| p["sim-ip-ready-ns"].as_u64())
            .ok_or("quiet node: the simulator has no sim-ip-ready-ns (rebuild it)")?;
        let ready = instant_of(ready);
        lags.push(if end >= ready {
            ms(end - ready)
        } else {
            -ms(ready - end)
        });
        match policy.bin {
            Some(bin) => {
                let del = env.with("DEL").run(bin, &conf, &scratch)?;
                expect_del("quiet node", &del)?;
            }
            None => {
                Legacy::new(&sim, &pod, &env).call("DEL", 0);
            }
        }
    }
    Ok(Quiet {
        role: policy.role,
        lag: stats(&lags),
        requests: stats(&requests).median,
    })
}

fn cx_requests(sim: &Sim) -> R<u64> {
    sim.get("/sim/stats")["requests"]
        .as_u64()
        .ok_or_else(|| "the simulator has no GET /sim/stats".to_string())
}
