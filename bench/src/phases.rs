//! The measurements: one attachment against ptp + static and the raw netlink floor, thick
//! mode, parallel pods, the readiness lag.

use crate::{Ctx, POD_ADDR, POD_GW, POD_MAC, R, THICK_SIZES, check_interrupt};

use crate::{measure::*, report::*, stats::*};
use contrail_k8s_cni::netlink::{self, Route, Socket, VethEnd};
use contrail_testkit::{Netns, PodSpec};
use ipnetwork::IpNetwork;
use std::collections::BTreeMap;
use std::fs::{self};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- 1-3: one attachment

#[derive(Default)]
pub(crate) struct Variant {
    pub(crate) add: Vec<f64>,
    pub(crate) del: Vec<f64>,
    pub(crate) total: Vec<f64>,
}

impl Variant {
    pub(crate) fn push(&mut self, add: f64, del: f64) {
        self.add.push(add);
        self.del.push(del);
        self.total.push(add + del);
    }
}

/// Peak RSS of one kind of call over its runs: of the largest process of each run, and per
/// process name.
#[derive(Default)]
pub(crate) struct Rss {
    pub(crate) largest: Vec<f64>,
    /// Sum over the call's processes of their private memory at exit.
    pub(crate) anon: Vec<f64>,
    /// Per process name: the largest peak, with its private and file-backed parts.
    pub(crate) by_process: BTreeMap<String, Peak>,
}

impl Rss {
    pub(crate) fn push(&mut self, call: &str, (ok, peaks): (bool, Vec<Peak>)) -> R<()> {
        if !ok {
            return Err(format!("{call} failed under ptrace"));
        }
        self.largest
            .push(peaks.first().map_or(0.0, |p| p.hwm as f64));
        self.anon.push(peaks.iter().map(|p| p.anon as f64).sum());
        for p in peaks {
            let e = self.by_process.entry(p.name.clone()).or_insert(p.clone());
            if p.hwm > e.hwm {
                *e = p;
            }
        }
        Ok(())
    }

    pub(crate) fn peak(&self) -> f64 {
        self.largest.iter().fold(0.0, |a, &b| a.max(b))
    }

    pub(crate) fn processes(&self) -> String {
        let v: Vec<String> = self
            .by_process
            .iter()
            .map(|(n, p)| format!("{n} {} ({} private + {} file)", p.hwm, p.anon, p.file))
            .collect();
        v.join(", ")
    }
}

pub(crate) struct Single {
    pub(crate) ours: Variant,
    pub(crate) ptp: Variant,
    pub(crate) raw: Variant,
    /// In-process floor without runtime and socket set-up: the kernel operations alone.
    pub(crate) raw_ops: Variant,
    /// The static-pie build (`--static-plugin`), when measured.
    pub(crate) stat: Option<Variant>,
    pub(crate) version_ours: Vec<f64>,
    pub(crate) version_ptp: Vec<f64>,
    pub(crate) version_true: Vec<f64>,
    /// One GET to the simulator from this program (new connection, as the plugin does).
    pub(crate) http: Vec<f64>,
    /// Peak RSS by call: ours ADD, ours DEL, ptp ADD, ptp DEL, ours VERSION, ptp VERSION, true.
    pub(crate) rss: Vec<(&'static str, Rss)>,
    /// What `wait4`'s ru_maxrss reports for /bin/true spawned by this program.
    pub(crate) wait4_true_kb: u64,
}

pub(crate) fn one_attachment(cx: &Ctx) -> R<Single> {
    let ns = Netns::new();
    let mut s = Single {
        ours: Variant::default(),
        ptp: Variant::default(),
        raw: Variant::default(),
        raw_ops: Variant::default(),
        stat: None,
        version_ours: Vec::new(),
        version_ptp: Vec::new(),
        version_true: Vec::new(),
        http: Vec::new(),
        rss: Vec::new(),
        wait4_true_kb: 0,
    };
    let total = cx.sizes.warmup + cx.sizes.runs;
    let scratch = cx.scratch("single");
    let ptp = cx.opts.ptp();
    // The variants: 0 contrail-k8s-cni, 1 ptp + static, 2 raw netlink, 3 the static-pie build.
    let n = if cx.opts.static_plugin.is_some() {
        4
    } else {
        3
    };
    let mut stat = Variant::default();
    for i in 0..total {
        check_interrupt()?;
        if i % 20 == 0 {
            eprintln!("  ADD+DEL run {i}/{total}");
        }
        let keep = i >= cx.sizes.warmup;
        // Rotate the order so that no variant always runs right after another.
        for k in 0..n {
            let (who, bin, conf, into) = match (i + k) % n {
                0 => (
                    "contrail-k8s-cni",
                    &cx.opts.plugin,
                    &cx.ours_conf,
                    &mut s.ours,
                ),
                1 => ("ptp", &ptp, &cx.ptp_conf, &mut s.ptp),
                2 => {
                    let t = raw_netlink(&ns, i == 0)?;
                    if keep {
                        s.raw.push(t.add, t.del);
                        s.raw_ops.push(t.add_ops, t.del_ops);
                    }
                    continue;
                }
                _ => match &cx.opts.static_plugin {
                    Some(bin) => ("static-pie build", bin, &cx.ours_conf, &mut stat),
                    None => continue,
                },
            };
            let env = cx.env("ADD", &ns, &cx.bench_pod.name);
            let add = env.run(bin, conf, &scratch)?;
            expect_add(who, &add)?;
            if i == 0 {
                assert_attached(&ns, who)?;
            }
            let del = env.with("DEL").run(bin, conf, &scratch)?;
            expect_del(who, &del)?;
            if keep {
                into.push(add.ms(), del.ms());
            }
            if i == 0 {
                assert_empty(&ns, who)?;
            }
        }
    }
    s.stat = cx.opts.static_plugin.is_some().then_some(stat);
    assert_empty(&ns, "ADD+DEL")?;
    eprintln!("  VERSION (start-up cost) x{}", cx.sizes.version_runs);
    for i in 0..cx.sizes.version_runs + cx.sizes.warmup {
        check_interrupt()?;
        let env = cx.env("VERSION", &ns, &cx.bench_pod.name);
        let truth = PathBuf::from("/bin/true");
        for (bin, times) in [
            (&cx.opts.plugin, &mut s.version_ours),
            (&ptp, &mut s.version_ptp),
            (&truth, &mut s.version_true),
        ] {
            let c = env.run(bin, &cx.version_conf, &scratch)?;
            if !c.ok {
                return Err(format!("VERSION failed: {}", c.describe()));
            }
            if i >= cx.sizes.warmup {
                times.push(c.ms());
            }
            if bin == &truth {
                s.wait4_true_kb = s.wait4_true_kb.max(c.maxrss_kb);
            }
        }
        let t = Instant::now();
        cx.sim
            .get(&format!("/vm-cfg/k8s__default__{}", cx.bench_pod.name));
        if i >= cx.sizes.warmup {
            s.http.push(ms(t.elapsed()));
        }
    }

    eprintln!("  peak RSS under ptrace x{}", cx.sizes.rss_runs);
    let labels = [
        "contrail-k8s-cni ADD",
        "contrail-k8s-cni DEL",
        "ptp + static ADD",
        "ptp + static DEL",
        "contrail-k8s-cni VERSION",
        "ptp VERSION",
        "/bin/true",
    ];
    let mut rss: Vec<Rss> = labels.iter().map(|_| Rss::default()).collect();
    let mut rss_static = [Rss::default(), Rss::default()];
    for _ in 0..cx.sizes.rss_runs {
        check_interrupt()?;
        for (k, (bin, conf)) in [(&cx.opts.plugin, &cx.ours_conf), (&ptp, &cx.ptp_conf)]
            .into_iter()
            .enumerate()
        {
            let env = cx.env("ADD", &ns, &cx.bench_pod.name);
            rss[2 * k].push(labels[2 * k], env.traced(bin, conf, &scratch)?)?;
            rss[2 * k + 1].push(
                labels[2 * k + 1],
                env.with("DEL").traced(bin, conf, &scratch)?,
            )?;
        }
        if let Some(bin) = &cx.opts.static_plugin {
            let env = cx.env("ADD", &ns, &cx.bench_pod.name);
            rss_static[0].push("static ADD", env.traced(bin, &cx.ours_conf, &scratch)?)?;
            let del = env.with("DEL").traced(bin, &cx.ours_conf, &scratch)?;
            rss_static[1].push("static DEL", del)?;
        }
        let env = cx.env("VERSION", &ns, &cx.bench_pod.name);
        rss[4].push(
            labels[4],
            env.traced(&cx.opts.plugin, &cx.version_conf, &scratch)?,
        )?;
        rss[5].push(labels[5], env.traced(&ptp, &cx.version_conf, &scratch)?)?;
        rss[6].push(
            labels[6],
            env.traced(Path::new("/bin/true"), &cx.version_conf, &scratch)?,
        )?;
    }
    assert_empty(&ns, "ADD+DEL under ptrace")?;
    s.rss = labels.into_iter().zip(rss).collect();
    if cx.opts.static_plugin.is_some() {
        let [a, d] = rss_static;
        s.rss.push(("static-pie build ADD", a));
        s.rss.push(("static-pie build DEL", d));
    }
    Ok(s)
}

pub(crate) struct RawTimes {
    pub(crate) add: f64,
    pub(crate) del: f64,
    pub(crate) add_ops: f64,
    pub(crate) del_ops: f64,
}

/// The kernel work of one attachment as bare netlink calls, in-process, with the plugin's own
/// netlink module: per "call" its sockets (host, and one created inside the pod's netns), then
/// veth with the peer created in the netns (name, MAC, MTU), both ends up, address, default
/// route; DEL is a new host socket and the delete.
pub(crate) fn raw_netlink(ns: &Netns, verify: bool) -> R<RawTimes> {
    let e = |what: &'static str| move |err: netlink::Error| format!("raw netlink {what}: {err}");
    let host_name = "rawveth0";

    let t0 = Instant::now();
    let netns = netlink::Netns::open(Path::new(&ns.path()))
        .map_err(|err| format!("raw netlink: open netns: {err}"))?;
    let mut host = Socket::host().map_err(e("socket"))?;
    let mut ctr = Socket::open(&netns).map_err(e("socket in netns"))?;
    let t_ops = Instant::now();
    let host_end = VethEnd {
        name: host_name,
        mac: None,
        mtu: 1500,
    };
    let peer = VethEnd {
        name: "eth0",
        mac: Some(POD_MAC),
        mtu: 1500,
    };
    host.create_veth(&host_end, &peer, &netns)
        .map_err(e("create veth"))?;
    let index = |s: &mut Socket, name: &str| -> R<u32> {
        Ok(s.link(name)
            .map_err(e("get link"))?
            .ok_or_else(|| format!("raw netlink: {name} missing"))?
            .index)
    };
    let h = index(&mut host, host_name)?;
    host.set_up(h).map_err(e("host end up"))?;
    let c = index(&mut ctr, "eth0")?;
    ctr.set_up(c).map_err(e("eth0 up"))?;
    let addr: IpNetwork = format!("{POD_ADDR}/24").parse().map_err(|_| "addr")?;
    ctr.add_addr(c, addr).map_err(e("address"))?;
    let route = Route {
        dst: "0.0.0.0/0".parse().map_err(|_| "dst")?,
        gateway: Some(POD_GW.parse().map_err(|_| "gw")?),
        oif: Some(c),
    };
    ctr.add_route(&route).map_err(e("route"))?;
    let add_ops = ms(t_ops.elapsed());
    drop((host, ctr, netns));
    let add = ms(t0.elapsed());
    if verify {
        assert_attached(ns, "raw netlink")?;
    }

    let t1 = Instant::now();
    let mut host = Socket::host().map_err(e("socket"))?;
    let t_ops = Instant::now();
    host.delete_link(host_name).map_err(e("delete"))?;
    let del_ops = ms(t_ops.elapsed());
    drop(host);
    Ok(RawTimes {
        add,
        del: ms(t1.elapsed()),
        add_ops,
        del_ops,
    })
}

/// What a single-interface ADD must leave: eth0 with the pod address, a default route.
pub(crate) fn assert_attached(ns: &Netns, who: &str) -> R<()> {
    let addrs = ns.addrs("eth0");
    let routes = ns.default_routes();
    let want = format!("{POD_ADDR}/24");
    if !addrs.contains(&want) || !routes.iter().any(|r| r.1 == POD_GW) {
        return Err(format!(
            "{who}: eth0 not set up as expected: {addrs:?} {routes:?}"
        ));
    }
    Ok(())
}

/// What a DEL must leave: only lo.
pub(crate) fn assert_empty(ns: &Netns, who: &str) -> R<()> {
    let names = ns.ifnames();
    if names != ["lo"] {
        return Err(format!("{who}: left {names:?} in {}", ns.name));
    }
    Ok(())
}

/// `--compare`: two builds of the plugin, interleaved, ADD+DEL times and traced peak RSS.
pub(crate) fn compare(cx: &Ctx, other: &Path) -> R<()> {
    let ns = Netns::new();
    let scratch = cx.scratch("compare");
    let bins = [cx.opts.plugin.as_path(), other];
    let mut v = [Variant::default(), Variant::default()];
    let mut rss = [Rss::default(), Rss::default()];
    let total = cx.sizes.warmup + cx.sizes.runs;
    for i in 0..total {
        check_interrupt()?;
        if i % 20 == 0 {
            eprintln!("  compare run {i}/{total}");
        }
        for k in [i % 2, 1 - i % 2] {
            let env = cx.env("ADD", &ns, &cx.bench_pod.name);
            let add = env.run(bins[k], &cx.ours_conf, &scratch)?;
            expect_add("compare", &add)?;
            let del = env.with("DEL").run(bins[k], &cx.ours_conf, &scratch)?;
            expect_del("compare", &del)?;
            if i >= cx.sizes.warmup {
                v[k].push(add.ms(), del.ms());
            }
        }
    }
    for _ in 0..cx.sizes.rss_runs {
        for k in 0..2 {
            let env = cx.env("ADD", &ns, &cx.bench_pod.name);
            rss[k].push("ADD", env.traced(bins[k], &cx.ours_conf, &scratch)?)?;
            rss[k].push(
                "DEL",
                env.with("DEL").traced(bins[k], &cx.ours_conf, &scratch)?,
            )?;
        }
    }
    eprintln!(
        "| build | ADD median | DEL median | ADD+DEL median | p95 | peak RSS KiB | size KiB |"
    );
    for k in 0..2 {
        let (a, d, t) = (stats(&v[k].add), stats(&v[k].del), stats(&v[k].total));
        eprintln!(
            "| {} | {} | {} | {} | {} | {} | {:.0} |",
            bins[k].display(),
            f2(a.median),
            f2(d.median),
            f2(t.median),
            f2(t.p95),
            rss[k].peak(),
            kb(bins[k])
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- 4: thick mode

pub(crate) struct Thick {
    pub(crate) n: usize,
    pub(crate) add: Stats,
    pub(crate) del: Stats,
    /// Peak RSS of one ADD and one DEL, traced.
    pub(crate) rss_kb: u64,
}

pub(crate) fn thick(cx: &Ctx) -> R<Vec<Thick>> {
    let scratch = cx.scratch("thick");
    let nss: Vec<Netns> = THICK_SIZES.iter().map(|_| Netns::new()).collect::<Vec<_>>();
    let mut add: Vec<Vec<f64>> = vec![Vec::new(); THICK_SIZES.len()];
    let mut del = add.clone();
    let mut rss = vec![0u64; THICK_SIZES.len()];
    let rounds = 1 + cx.sizes.thick_reps.iter().max().copied().unwrap_or(0);
    for round in 0..rounds {
        check_interrupt()?;
        eprintln!("  thick round {round}/{rounds}");
        for (k, (&n, pod)) in THICK_SIZES.iter().zip(&cx.thick_pods).enumerate() {
            // Round 0 warms up; then each size until it has its repetitions.
            if round > cx.sizes.thick_reps[k] {
                continue;
            }
            let env = cx.env("ADD", &nss[k], &pod.name);
            let a = env.run(&cx.opts.thick, &cx.thick_conf, &scratch)?;
            expect_add(&format!("thick x{n}"), &a)?;
            if round == 0 {
                let names = nss[k].ifnames();
                if names.len() != n + 1 {
                    return Err(format!(
                        "thick x{n}: {} interfaces in the pod",
                        names.len() - 1
                    ));
                }
            }
            let d = env
                .with("DEL")
                .run(&cx.opts.thick, &cx.thick_conf, &scratch)?;
            expect_del(&format!("thick x{n}"), &d)?;
            if round == 0 {
                assert_empty(&nss[k], &format!("thick x{n}"))?;
                // One traced ADD+DEL per size for its peak RSS.
                let env = cx.env("ADD", &nss[k], &pod.name);
                for e in [&env, &env.with("DEL")] {
                    let (ok, peaks) = e.traced(&cx.opts.thick, &cx.thick_conf, &scratch)?;
                    if !ok {
                        return Err(format!("thick x{n}: {} failed under ptrace", e.command));
                    }
                    rss[k] = rss[k].max(peaks.first().map_or(0, |p| p.hwm));
                }
            } else {
                add[k].push(a.ms());
                del[k].push(d.ms());
            }
        }
    }
    Ok(THICK_SIZES
        .iter()
        .enumerate()
        .map(|(k, &n)| Thick {
            n,
            add: stats(&add[k]),
            del: stats(&del[k]),
            rss_kb: rss[k],
        })
        .collect())
}

// ---------------------------------------------------------------- 5: parallel pods

pub(crate) struct Parallel {
    pub(crate) pods: usize,
    pub(crate) add_total: f64,
    pub(crate) del_total: f64,
    pub(crate) add: Stats,
    pub(crate) del: Stats,
    pub(crate) add_failures: Vec<String>,
    pub(crate) del_failures: Vec<String>,
    pub(crate) host_links: usize,
}

pub(crate) fn parallel(cx: &Ctx) -> R<Parallel> {
    eprintln!("  creating {} pod netns", cx.parallel_pods.len());
    let nss: Vec<Netns> = (0..cx.parallel_pods.len())
        .map(|_| Netns::new())
        .collect::<Vec<_>>();
    let envs: Vec<CniEnv> = cx
        .parallel_pods
        .iter()
        .zip(&nss)
        .map(|(p, ns)| cx.env("ADD", ns, &p.name))
        .collect();
    check_interrupt()?;
    eprintln!("  {} ADDs at once", envs.len());
    let adds = all_at_once(cx, &envs, "ADD")?;
    let host_links = fs::read_dir("/sys/class/net")
        .map(|d| d.filter_map(Result::ok).count())
        .unwrap_or(0);
    eprintln!("  {} DELs at once", envs.len());
    let dels = all_at_once(cx, &envs, "DEL")?;
    let failures = |calls: &[Call], add: bool| -> Vec<String> {
        calls
            .iter()
            .filter_map(|c| {
                let r = if add {
                    expect_add("", c)
                } else {
                    expect_del("", c)
                };
                r.err()
            })
            .collect()
    };
    let span = |calls: &[Call]| {
        let start = calls.iter().map(|c| c.start).min();
        let end = calls.iter().map(|c| c.end).max();
        start.zip(end).map_or(0.0, |(s, e)| ms(e - s))
    };
    let p = Parallel {
        pods: envs.len(),
        add_total: span(&adds),
        del_total: span(&dels),
        add: stats(&adds.iter().map(Call::ms).collect::<Vec<_>>()),
        del: stats(&dels.iter().map(Call::ms).collect::<Vec<_>>()),
        add_failures: failures(&adds, true),
        del_failures: failures(&dels, false),
        host_links,
    };
    for ns in &nss {
        assert_empty(ns, "parallel DEL")?;
    }
    Ok(p)
}

/// One thread per pod, released together by a barrier; each runs its call.
pub(crate) fn all_at_once(cx: &Ctx, envs: &[CniEnv], command: &'static str) -> R<Vec<Call>> {
    let barrier = Barrier::new(envs.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = envs
            .iter()
            .enumerate()
            .map(|(i, env)| {
                let barrier = &barrier;
                s.spawn(move || {
                    let env = env.with(command);
                    let scratch = cx.scratch(&format!("par{i}"));
                    barrier.wait();
                    env.run(&cx.opts.plugin, &cx.ours_conf, &scratch)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "thread panicked".to_string())?)
            .collect()
    })
}

// ---------------------------------------------------------------- 6: readiness lag

pub(crate) struct Ready {
    /// (ready moment after the ADD started, lag after the ready moment), ms.
    pub(crate) samples: Vec<(f64, f64)>,
    pub(crate) lag: Stats,
}

pub(crate) fn readiness(cx: &Ctx) -> R<Ready> {
    let workers = cx.sizes.ready_workers;
    let nss: Vec<Netns> = (0..workers).map(|_| Netns::new()).collect::<Vec<_>>();
    let next = AtomicUsize::new(0);
    let samples = Mutex::new(Vec::new());
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
    let samples = samples.into_inner().unwrap_or_else(|p| p.into_inner());
    let lag = stats(&samples.iter().map(|s| s.1).collect::<Vec<_>>());
    Ok(Ready { samples, lag })
}

/// The agent has an IP configuration only for a registered port, `ip-delay-ms` after the
/// registration: the simulator reports when the plugin registered the VMI (CLOCK_MONOTONIC, the
/// clock behind `Instant`), so the ready moment is known exactly.
pub(crate) fn ready_once(cx: &Ctx, ns: &Netns, pod: &PodSpec, scratch: &Path) -> R<(f64, f64)> {
    let env = cx.env("ADD", ns, &pod.name);
    let add = env.run(&cx.opts.plugin, &cx.ours_conf, scratch)?;
    expect_add("readiness", &add)?;
    let ports = cx.sim.get("/sim/ports");
    let registered_ns = ports
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["vmi-uuid"] == pod.vmis[0].uuid.as_str())
        .and_then(|p| p["sim-registered-ns"].as_u64())
        .ok_or_else(|| format!("readiness: {} is not registered", pod.vmis[0].uuid))?;
    let ready = instant_of(registered_ns)
        + Duration::from_millis(pod.vmis[0].extra["ip-delay-ms"].as_u64().unwrap_or(0));
    let lag = if add.end >= ready {
        ms(add.end - ready)
    } else {
        -ms(ready - add.end)
    };
    let at = if ready >= add.start {
        ms(ready - add.start)
    } else {
        -ms(add.start - ready)
    };
    let del = env
        .with("DEL")
        .run(&cx.opts.plugin, &cx.ours_conf, scratch)?;
    expect_del("readiness", &del)?;
    Ok((at, lag))
}
