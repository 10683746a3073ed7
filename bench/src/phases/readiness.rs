//! Section 8: the readiness lag, how long after the VMI's IP configuration appears does ADD
//! return, and how many polls the waiting calls make.

use crate::context::{Ctx, check_interrupt};
use crate::error::R;
use crate::measure::{expect_add, expect_del, instant_of, ms};
use crate::stats::{Stats, stats};

use contrail_testkit::{Netns, PodSpec};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct Ready {
    /// (ready moment after the ADD started, lag after the ready moment), ms.
    pub(crate) samples: Vec<(f64, f64)>,
    pub(crate) lag: Stats,
    /// The lag's two parts: from the ready moment to the poll that saw it (the simulator's
    /// first 200 for the VMI), and from there to the ADD's return (the rest of the ADD).
    pub(crate) seen: Stats,
    pub(crate) rest: Stats,
    /// Per sample whose IP configuration came after the early polls: how much later than due
    /// the poll that saw it came, ms. Due: one `POLL_PERIOD` after the poll before it (the
    /// last that answered 404), so that the lag beyond its own floor is known per sample,
    /// without the phase of the ready moment between two polls, which is noise.
    pub(crate) late: Vec<f64>,
    /// Requests the agent served during the phase (its ADDs and DELs).
    pub(crate) requests: u64,
    /// Seconds the ADDs spent waiting: from their registration to their return (the delay of
    /// the IP configuration plus the lag), summed.
    pub(crate) waiting_s: f64,
}

pub(crate) fn readiness(cx: &Ctx) -> R<Ready> {
    let workers = cx.sizes.ready_workers;
    let nss: Vec<Netns> = (0..workers).map(|_| Netns::new()).collect::<Vec<_>>();
    let next = AtomicUsize::new(0);
    let samples = Mutex::new(Vec::new());
    let before = cx.agent_requests()?;
    let failed: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|s| {
        for (w, ns) in nss.iter().enumerate() {
            let (next, samples, failed) = (&next, &samples, &failed);
            s.spawn(move || {
                let scratch = cx.scratch(&format!("ready{w}"));
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= cx.ready_pods.len() || check_interrupt().is_err() {
                        break;
                    }
                    if i % 10 == 0 {
                        eprintln!("  readiness sample {i}/{}", cx.ready_pods.len());
                    }
                    match ready_once(cx, ns, &cx.ready_pods[i], &scratch) {
                        Ok(x) => samples.lock().unwrap_or_else(|p| p.into_inner()).push(x),
                        Err(e) => {
                            *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                            break;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    check_interrupt()?;
    let requests = cx.agent_requests()? - before;
    let samples = samples.into_inner().unwrap_or_else(|p| p.into_inner());
    let part = |k: usize| stats(&samples.iter().map(|s| s.0[k]).collect::<Vec<_>>());
    let lags: Vec<f64> = samples.iter().map(|s| s.0[1]).collect();
    // Every pod ran (or the phase failed above): its delay once, its lag once.
    let delays: u64 = cx.ready_pods.iter().map(ip_delay_ms).sum();
    let waiting_s = (delays as f64 + lags.iter().sum::<f64>()) / 1000.0;
    Ok(Ready {
        samples: samples.iter().map(|s| (s.0[0], s.0[1])).collect(),
        lag: stats(&lags),
        seen: part(2),
        rest: part(3),
        late: samples.iter().filter_map(|s| s.1).collect(),
        requests,
        waiting_s,
    })
}

/// The agent has an IP configuration only for a registered port, `ip-delay-ms` after the
/// registration: the simulator reports when the plugin registered the VMI and when it first
/// answered with its IP configuration (CLOCK_MONOTONIC, the clock behind `Instant`), so the
/// ready moment and the poll that saw it are known exactly, and the one before it. ms: the
/// ready moment after the ADD started, the lag, its part until that poll, its part after; and
/// how late that poll came (see [`Ready::late`]) when the one before it was past the early polls.
pub(crate) fn ready_once(
    cx: &Ctx,
    ns: &Netns,
    pod: &PodSpec,
    scratch: &Path,
) -> R<([f64; 4], Option<f64>)> {
    let env = cx.env(&cx.node, "ADD", ns, &pod.name);
    let add = env.run(&cx.opts.plugin, &cx.ours_conf, scratch)?;
    expect_add("readiness", &add)?;
    let ports = cx.sim.get("/sim/ports");
    let port = ports
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["vmi-uuid"] == pod.vmis[0].uuid.as_str())
        .ok_or_else(|| format!("readiness: {} is not registered", pod.vmis[0].uuid))?;
    let clock = |key: &str| {
        port[key]
            .as_u64()
            .map(instant_of)
            .ok_or_else(|| format!("readiness: the simulator's port has no {key} (rebuild it)"))
    };
    let signed = |a: Instant, b: Instant| if a >= b { ms(a - b) } else { -ms(b - a) };
    let ready = clock("sim-registered-ns")? + Duration::from_millis(ip_delay_ms(pod));
    let seen = clock("sim-ip-answered-ns")?;
    // The plugin's first polls come 5 and 10 ms apart, then one every POLL_PERIOD: from the
    // third miss on, the next poll was due a period after the last.
    let late = match port["sim-ip-misses"].as_u64() {
        Some(misses) if misses >= 3 => {
            let due = clock("sim-ip-missed-ns")? + contrail_k8s_cni::POLL_PERIOD;
            Some(signed(seen, due))
        }
        _ => None,
    };
    let del = env
        .with("DEL")
        .run(&cx.opts.plugin, &cx.ours_conf, scratch)?;
    expect_del("readiness", &del)?;
    Ok((
        [
            signed(ready, add.start),
            signed(add.end, ready),
            signed(seen, ready),
            signed(add.end, seen),
        ],
        late,
    ))
}

/// When a one-VMI pod's IP configuration comes, ms after its registration.
fn ip_delay_ms(pod: &PodSpec) -> u64 {
    pod.vmis[0].extra["ip-delay-ms"].as_u64().unwrap_or(0)
}
