//! Sections 1-3: one attachment, ADD and DEL of contrail-k8s-cni against ptp + static and the
//! floor's parts, interleaved; start-up alone; peak RSS under ptrace.

use crate::context::{Ctx, POD_ADDR, POD_GW, POD_MAC, check_interrupt};
use crate::error::R;
use crate::measure::{Peak, expect_add, expect_del, ms};
use crate::phases::checks::{assert_attached, assert_empty};

use contrail_k8s_cni::kernel::netlink::{self, Route, Socket, VethEnd};
use contrail_testkit::{Netns, exchange};
use ipnetwork::IpNetwork;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

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
    /// contrail-k8s-cni with the same network as a vhost-user attachment: no kernel interface,
    /// `POST /port`, the pod's directory and the `uvh_vif_` link.
    pub(crate) vhost: Variant,
    pub(crate) ptp: Variant,
    /// The attachment's netlink work in-process: the netns, the sockets, the operations.
    pub(crate) raw: Variant,
    /// The same without the netns and socket set-up: the kernel operations alone.
    pub(crate) raw_ops: Variant,
    /// The rest of the ADD's floor: an empty static program, spawned and reaped as the plugin
    /// is, and the agent's requests of one ADD in-process on one kept-alive connection.
    pub(crate) empty: Vec<f64>,
    pub(crate) agent: Vec<f64>,
    /// Agent requests of each of contrail-k8s-cni's timed ADDs and DELs (the agent answering
    /// at once), counted by the simulator.
    pub(crate) requests_add: Vec<f64>,
    pub(crate) requests_del: Vec<f64>,
    pub(crate) version_ours: Vec<f64>,
    pub(crate) version_ptp: Vec<f64>,
    pub(crate) version_true: Vec<f64>,
    /// Peak RSS by call: ours ADD, ours DEL, ptp ADD, ptp DEL, ours VERSION, ptp VERSION, true.
    pub(crate) rss: Vec<(&'static str, Rss)>,
    /// What `wait4`'s ru_maxrss reports for /bin/true spawned by this program.
    pub(crate) wait4_true_kb: u64,
}

pub(crate) fn one_attachment(cx: &Ctx) -> R<Single> {
    let ns = Netns::new();
    let mut s = Single {
        ours: Variant::default(),
        vhost: Variant::default(),
        ptp: Variant::default(),
        raw: Variant::default(),
        raw_ops: Variant::default(),
        empty: Vec::new(),
        agent: Vec::new(),
        requests_add: Vec::new(),
        requests_del: Vec::new(),
        version_ours: Vec::new(),
        version_ptp: Vec::new(),
        version_true: Vec::new(),
        rss: Vec::new(),
        wait4_true_kb: 0,
    };
    let total = cx.sizes.warmup + cx.sizes.runs;
    let scratch = cx.scratch("single");
    let ptp = cx.opts.ptp();
    for i in 0..total {
        check_interrupt()?;
        if i % 20 == 0 {
            eprintln!("  ADD+DEL run {i}/{total}");
        }
        let keep = i >= cx.sizes.warmup;
        // Rotate the order so that no variant always runs right after another: 0
        // contrail-k8s-cni, 1 ptp + static, 2 the floor's parts, 3 contrail-k8s-cni vhost-user.
        for k in 0..4 {
            let variant = (i + k) % 4;
            if variant == 3 {
                let t = vhost_user_add_del(cx, &ns, &scratch, i == 0)?;
                if keep {
                    s.vhost.push(t.0, t.1);
                }
                continue;
            }
            let (who, bin, conf, into) = match variant {
                0 => (
                    "contrail-k8s-cni",
                    &cx.opts.plugin,
                    &cx.ours_conf,
                    &mut s.ours,
                ),
                1 => ("ptp", &ptp, &cx.ptp_conf, &mut s.ptp),
                _ => {
                    let t = raw_netlink(&ns, i == 0)?;
                    let empty = cx.env(&cx.node, "VERSION", &ns, "-");
                    let empty = empty.run(&cx.empty, &cx.version_conf, &scratch)?;
                    let agent = agent_requests_of_an_add(cx, i == 0)?;
                    if keep {
                        s.raw.push(t.add, t.del);
                        s.raw_ops.push(t.add_ops, t.del_ops);
                        s.empty.push(empty.ms());
                        s.agent.push(agent);
                    }
                    continue;
                }
            };
            // The simulator counts contrail-k8s-cni's requests, read between the timed calls.
            let ours = variant == 0;
            let count = || if ours { cx.agent_requests() } else { Ok(0) };
            let before = count()?;
            let env = cx.env(&cx.node, "ADD", &ns, &cx.bench_pod.name);
            let add = env.run(bin, conf, &scratch)?;
            expect_add(who, &add)?;
            if i == 0 {
                assert_attached(&ns, who)?;
            }
            let between = count()?;
            let del = env.with("DEL").run(bin, conf, &scratch)?;
            expect_del(who, &del)?;
            let after = count()?;
            if keep {
                into.push(add.ms(), del.ms());
                if ours {
                    s.requests_add.push((between - before) as f64);
                    s.requests_del.push((after - between) as f64);
                }
            }
            if i == 0 {
                assert_empty(&ns, who)?;
            }
        }
    }
    assert_empty(&ns, "ADD+DEL")?;
    eprintln!("  VERSION (start-up cost) x{}", cx.sizes.version_runs);
    for i in 0..cx.sizes.version_runs + cx.sizes.warmup {
        check_interrupt()?;
        let env = cx.env(&cx.node, "VERSION", &ns, &cx.bench_pod.name);
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
    for _ in 0..cx.sizes.rss_runs {
        check_interrupt()?;
        for (k, (bin, conf)) in [(&cx.opts.plugin, &cx.ours_conf), (&ptp, &cx.ptp_conf)]
            .into_iter()
            .enumerate()
        {
            let env = cx.env(&cx.node, "ADD", &ns, &cx.bench_pod.name);
            rss[2 * k].push(labels[2 * k], env.traced(bin, conf, &scratch)?)?;
            rss[2 * k + 1].push(
                labels[2 * k + 1],
                env.with("DEL").traced(bin, conf, &scratch)?,
            )?;
        }
        let env = cx.env(&cx.node, "VERSION", &ns, &cx.bench_pod.name);
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
    Ok(s)
}

/// One ADD and DEL of the bench pod's attachment as a vhost-user one: (ADD ms, DEL ms). The
/// first run checks the link was made and removed, and that the pod's netns was left alone.
fn vhost_user_add_del(cx: &Ctx, ns: &Netns, scratch: &Path, verify: bool) -> R<(f64, f64)> {
    let who = "contrail-k8s-cni vhost-user";
    let mut env = cx.env(&cx.node, "ADD", ns, &cx.bench_pod.name);
    env.pod_uid = Some(cx.bench_pod.uuid.clone());
    let links = || -> usize {
        fs::read_dir(&cx.vrouter_dir)
            .map(|d| d.flatten().count())
            .unwrap_or(0)
    };
    let add = env.run(&cx.opts.plugin, &cx.vhost_conf, scratch)?;
    expect_add(who, &add)?;
    if verify {
        assert_empty(ns, who)?;
        if links() != 1 {
            return Err(format!("{who}: ADD made no uvh_vif_ link"));
        }
    }
    let del = env
        .with("DEL")
        .run(&cx.opts.plugin, &cx.vhost_conf, scratch)?;
    expect_del(who, &del)?;
    if verify && links() != 0 {
        return Err(format!("{who}: DEL left the uvh_vif_ link"));
    }
    Ok((add.ms(), del.ms()))
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

/// The agent's part of the ADD floor, ms: the three requests of one attachment's ADD (the
/// pod's VMIs, the registration, the IP configuration), in-process, on one kept-alive
/// connection, its set-up and close included (the plugin opens and closes one too), answers
/// parsed as JSON. The registration is then withdrawn, untimed, so that the plugin's next ADD
/// finds none.
fn agent_requests_of_an_add(cx: &Ctx, verify: bool) -> R<f64> {
    let pod = &cx.bench_pod;
    let vmi = &pod.vmis[0];
    let json = |(status, body): (String, String)| -> R<Value> {
        if status != "HTTP/1.1 200 OK" {
            return Err(format!("floor: the simulator answered {status}"));
        }
        serde_json::from_str(&body).map_err(|e| format!("floor: {e}"))
    };
    let t = Instant::now();
    let mut conn = cx.sim.connect();
    let cfg = json(exchange(
        &mut conn,
        "GET",
        &format!("/vm-cfg/{}", pod.vm_name()),
        None,
    ))?;
    let vn = cfg
        .as_array()
        .and_then(|a| a.iter().find(|v| v["id"] == vmi.uuid.as_str()))
        .map(|v| v["vn-id"].clone())
        .ok_or("floor: the VMI is not in the pod's /vm-cfg")?;
    let port = serde_json::json!({"vm-id": "floor", "vm-uuid": pod.uuid, "vm-name": pod.vm_name(),
        "host-ifname": "rawveth0", "vm-ifname": "eth0", "vm-namespace": "/run/netns/floor",
        "vn-uuid": vn, "vmi-uuid": vmi.uuid});
    json(exchange(&mut conn, "POST", "/vm", Some(&port)))?;
    let ip = json(exchange(
        &mut conn,
        "GET",
        &format!("/vm/{}/{}", pod.uuid, vmi.uuid),
        None,
    ))?;
    drop(conn);
    let took = ms(t.elapsed());
    if verify && ip[0]["ip-address"] != POD_ADDR {
        return Err(format!("floor: unexpected IP configuration {ip}"));
    }
    json(exchange(
        &mut cx.sim.connect(),
        "DELETE",
        &format!("/vm/{}", pod.uuid),
        None,
    ))?;
    Ok(took)
}
