//! The measurements: one attachment against ptp + static and the floor, the state directory on
//! other filesystems, thick mode, parallel pods, a full node, the readiness lag.

use crate::{
    Ctx, NODE_ATTACHMENTS, POD_ADDR, POD_GW, POD_MAC, R, THICK_SIZES, check_interrupt, node_in,
};

use crate::{measure::*, report::*, stats::*};
use contrail_k8s_cni::kernel::netlink::{self, Route, Socket, VethEnd};
use contrail_testkit::{Netns, PodSpec, Sim, exchange, try_sh};
use ipnetwork::IpNetwork;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
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
            let env = cx.env(&cx.node, "ADD", &ns, &cx.bench_pod.name);
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
            let env = cx.env(&cx.node, "ADD", &ns, &cx.bench_pod.name);
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

// ---------------------------------------------------------------- 4: the state directory elsewhere

/// A filesystem mounted in the bench's own mount namespace (the machine never sees it),
/// unmounted on drop and its image file removed. `mount -o loop` makes the loop device clear
/// itself at the unmount, which also happens when the namespace ends with the process.
pub(crate) struct Mount {
    pub(crate) dir: PathBuf,
    image: Option<PathBuf>,
    mounted: bool,
}

impl Mount {
    /// A tmpfs of 64 MiB, with more mount `options` ("" for none).
    pub(crate) fn tmpfs(dir: PathBuf, options: &str) -> R<Mount> {
        let mut m = Mount {
            dir,
            image: None,
            mounted: false,
        };
        fs::create_dir_all(&m.dir).map_err(|e| format!("{}: {e}", m.dir.display()))?;
        try_sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size=64m{options}"),
                "tmpfs",
                &m.path(),
            ],
        )?;
        m.mounted = true;
        Ok(m)
    }

    /// ext4 on a loop device: a sparse 64 MiB file `image`, `mkfs.ext4 -q`, `mount -o loop`.
    pub(crate) fn ext4(image: PathBuf, dir: PathBuf) -> R<Mount> {
        let mut m = Mount {
            dir,
            image: Some(image.clone()),
            mounted: false,
        };
        File::create(&image)
            .and_then(|f| f.set_len(64 << 20))
            .map_err(|e| format!("{}: {e}", image.display()))?;
        fs::create_dir_all(&m.dir).map_err(|e| format!("{}: {e}", m.dir.display()))?;
        let image = image.to_string_lossy();
        try_sh("mkfs.ext4", &["-q", &image])?;
        try_sh("mount", &["-o", "loop", &image, &m.path()])?;
        m.mounted = true;
        Ok(m)
    }

    fn path(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        use nix::mount::{MntFlags, umount2};
        if self.mounted && umount2(&self.dir, MntFlags::empty()).is_err() {
            // Busy: detach it now, the kernel lets it go (and its loop device) when unused.
            let _ = umount2(&self.dir, MntFlags::MNT_DETACH);
        }
        if let Some(image) = &self.image {
            let _ = fs::remove_file(image);
        }
    }
}

/// The filesystem a path is on, as `findmnt` names it: "ext4 on /dev/vda".
fn filesystem_of(path: &Path) -> String {
    let path = path.to_string_lossy();
    try_sh("findmnt", &["-n", "-o", "FSTYPE,SOURCE", "-T", &path])
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" on "))
        .unwrap_or_else(|_| "?".into())
}

/// One filesystem of the state directory: ADD and DEL times, and the syncs of one of each.
pub(crate) struct Disk {
    pub(crate) fs: String,
    pub(crate) add: Vec<f64>,
    pub(crate) del: Vec<f64>,
    pub(crate) add_syncs: BTreeMap<String, u64>,
    pub(crate) del_syncs: BTreeMap<String, u64>,
}

/// One attachment's ADD and DEL with the state directory on ext4 on a loop device (as in the
/// other phases), on tmpfs and in the temporary directory, interleaved; then one ADD and one
/// DEL of each under strace, counting their syncs.
pub(crate) fn disk(cx: &Ctx) -> R<Vec<Disk>> {
    let tmpfs = Mount::tmpfs(cx.dir.0.join("tmpfs"), "")?;
    let places = [
        (
            format!(
                "{} (a sparse 64 MiB file in the temp dir), as in the other phases",
                filesystem_of(&cx.ext4.dir)
            ),
            cx.ext4.dir.join("disk-ports"),
        ),
        ("tmpfs".to_string(), tmpfs.dir.join("ports")),
        (
            format!("the temp dir: {}", filesystem_of(&cx.dir.0)),
            cx.dir.0.join("ports"),
        ),
    ];
    let nodes: Vec<_> = places
        .iter()
        .map(|(_, dir)| node_in(&cx.sim, dir))
        .collect();
    let mut rows: Vec<Disk> = places
        .into_iter()
        .map(|(fs, _)| Disk {
            fs,
            add: Vec::new(),
            del: Vec::new(),
            add_syncs: BTreeMap::new(),
            del_syncs: BTreeMap::new(),
        })
        .collect();
    let ns = Netns::new();
    let scratch = cx.scratch("disk");
    let total = cx.sizes.warmup + cx.sizes.disk_runs;
    for i in 0..total {
        check_interrupt()?;
        if i % 20 == 0 {
            eprintln!("  ADD+DEL run {i}/{total}");
        }
        for k in 0..rows.len() {
            let k = (i + k) % rows.len();
            let env = cx.env(&nodes[k], "ADD", &ns, &cx.bench_pod.name);
            let add = env.run(&cx.opts.plugin, &cx.ours_conf, &scratch)?;
            expect_add(&rows[k].fs, &add)?;
            let del = env
                .with("DEL")
                .run(&cx.opts.plugin, &cx.ours_conf, &scratch)?;
            expect_del(&rows[k].fs, &del)?;
            if i >= cx.sizes.warmup {
                rows[k].add.push(add.ms());
                rows[k].del.push(del.ms());
            }
        }
    }
    eprintln!("  syncs of one ADD and one DEL under strace");
    for (row, node) in rows.iter_mut().zip(&nodes) {
        let conf = &cx.ours_conf;
        let env = cx.env(node, "ADD", &ns, &cx.bench_pod.name);
        let (added, add) = env.syncs(&cx.opts.plugin, conf, &scratch)?;
        let (deleted, del) = env.with("DEL").syncs(&cx.opts.plugin, conf, &scratch)?;
        if !(added && deleted) {
            return Err(format!("{}: ADD or DEL failed under strace", row.fs));
        }
        (row.add_syncs, row.del_syncs) = (add, del);
    }
    assert_empty(&ns, "state directory on a disk")?;
    Ok(rows)
}

// ---------------------------------------------------------------- 5: thick mode

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
            let env = cx.env(&cx.thick_node, "ADD", &nss[k], &pod.name);
            let a = env.run(&cx.opts.thick, &cx.ours_conf, &scratch)?;
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
                .run(&cx.opts.thick, &cx.ours_conf, &scratch)?;
            expect_del(&format!("thick x{n}"), &d)?;
            if round == 0 {
                assert_empty(&nss[k], &format!("thick x{n}"))?;
                // One traced ADD+DEL per size for its peak RSS.
                let env = cx.env(&cx.thick_node, "ADD", &nss[k], &pod.name);
                for e in [&env, &env.with("DEL")] {
                    let (ok, peaks) = e.traced(&cx.opts.thick, &cx.ours_conf, &scratch)?;
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

// ---------------------------------------------------------------- 6: parallel pods

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
    let sandboxes: Vec<CniEnv> = cx
        .parallel_pods
        .iter()
        .zip(&nss)
        .map(|(p, ns)| cx.env(&cx.node, "ADD", ns, &p.name))
        .collect();
    let calls = |command| -> Vec<Sequence> {
        let conf = cx.ours_conf.as_path();
        sandboxes
            .iter()
            .map(|s| vec![(s.with(command), conf)])
            .collect()
    };
    let (add_calls, del_calls) = (calls("ADD"), calls("DEL"));
    check_interrupt()?;
    eprintln!("  {} ADDs at once", add_calls.len());
    let adds: Vec<Call> = all_at_once(cx, &add_calls, false)?
        .into_iter()
        .flatten()
        .collect();
    let host_links = fs::read_dir("/sys/class/net")
        .map(|d| d.filter_map(Result::ok).count())
        .unwrap_or(0);
    eprintln!("  {} DELs at once", del_calls.len());
    let dels: Vec<Call> = all_at_once(cx, &del_calls, true)?
        .into_iter()
        .flatten()
        .collect();
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
    let p = Parallel {
        pods: add_calls.len(),
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

/// From the first call's start to the last one's end, ms.
pub(crate) fn span<'a>(calls: impl IntoIterator<Item = &'a Call>) -> f64 {
    let mut bounds: Option<(Instant, Instant)> = None;
    for c in calls {
        bounds = Some(bounds.map_or((c.start, c.end), |(s, e)| (s.min(c.start), e.max(c.end))));
    }
    bounds.map_or(0.0, |(s, e)| ms(e - s))
}

/// One pod's calls in the order its meta-plugin makes them: each call's environment and config.
pub(crate) type Sequence<'a> = Vec<(CniEnv, &'a Path)>;

/// One thread per pod, all released together by a barrier; each runs its pod's calls in order,
/// stopping at the first that fails unless `keep_going` (Multus stops its ADDs at a failure,
/// and goes on with its DELs). The calls each pod made.
pub(crate) fn all_at_once(cx: &Ctx, pods: &[Sequence], keep_going: bool) -> R<Vec<Vec<Call>>> {
    let barrier = Barrier::new(pods.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, sequence)| {
                let barrier = &barrier;
                s.spawn(move || -> R<Vec<Call>> {
                    let scratch = cx.scratch(&format!("par{i}"));
                    barrier.wait();
                    let mut calls = Vec::new();
                    for (env, conf) in sequence {
                        let call = env.run(&cx.opts.plugin, conf, &scratch)?;
                        let failed = !call.ok;
                        calls.push(call);
                        if failed && !keep_going {
                            break;
                        }
                    }
                    Ok(calls)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "thread panicked".to_string())?)
            .collect()
    })
}

// ---------------------------------------------------------------- 7: a full node

/// One command for every pod of a full node.
pub(crate) struct Wave {
    /// From the first call's start to the last one's end, ms.
    pub(crate) total: f64,
    /// Each pod's calls, from the start of its first to the end of its last, ms.
    pub(crate) pod: Stats,
    /// Requests the agent served meanwhile.
    pub(crate) requests: u64,
    /// The same by "METHOD route status".
    pub(crate) by_kind: BTreeMap<String, u64>,
    /// Each failed call: pod, interface, what it printed.
    pub(crate) failures: Vec<String>,
}

pub(crate) struct NodeRound {
    pub(crate) pods: usize,
    pub(crate) add: Wave,
    pub(crate) del: Wave,
    /// What the checks after the ADDs and after the DELs found wrong.
    pub(crate) problems: Vec<String>,
}

/// Rounds of `node_sizes` pods with the attachments of `NODE_ATTACHMENTS` each: all pods'
/// ADDs at once (each pod's in Multus's order), the checks, all DELs at once (each pod's in
/// reverse), the checks that nothing is left.
pub(crate) fn full_node(cx: &Ctx) -> R<Vec<NodeRound>> {
    let state = PathBuf::from(
        cx.node.contrail()["config-dir"]
            .as_str()
            .unwrap_or_default(),
    );
    let confs: Vec<PathBuf> = NODE_ATTACHMENTS
        .iter()
        .map(|(_, _, name)| cx.stdin(name))
        .collect::<R<_>>()?;
    eprintln!("  creating {} pod netns", cx.node_pods.len());
    let nss: Vec<Netns> = cx.node_pods.iter().map(|_| Netns::new()).collect();
    let mut rounds = Vec::new();
    for &n in &cx.sizes.node_sizes {
        check_interrupt()?;
        let (pods, nss) = (&cx.node_pods[..n], &nss[..n]);
        eprintln!("  {n} pods x {} attachments", NODE_ATTACHMENTS.len());
        // One sandbox (container id) per pod, all of its attachments' calls in it.
        let sandboxes: Vec<CniEnv> = pods
            .iter()
            .zip(nss)
            .map(|(p, ns)| cx.env(&cx.node, "ADD", ns, &p.name))
            .collect();
        let add = wave(cx, pods, &sandboxes, "ADD", &confs)?;
        let mut problems = check_attached(&cx.sim, pods, nss)?;
        let del = wave(cx, pods, &sandboxes, "DEL", &confs)?;
        problems.extend(check_nothing_left(&cx.sim, pods, nss, &state)?);
        rounds.push(NodeRound {
            pods: n,
            add,
            del,
            problems,
        });
    }
    Ok(rounds)
}

/// `command` for every attachment of every pod: ADD in `NODE_ATTACHMENTS` order, DEL in
/// reverse; the pods in parallel (one thread each).
fn wave(
    cx: &Ctx,
    pods: &[PodSpec],
    sandboxes: &[CniEnv],
    command: &'static str,
    confs: &[PathBuf],
) -> R<Wave> {
    let mut order: Vec<usize> = (0..NODE_ATTACHMENTS.len()).collect();
    if command == "DEL" {
        order.reverse();
    }
    let sequences: Vec<Sequence> = sandboxes
        .iter()
        .map(|sandbox| {
            let sandbox = sandbox.with(command);
            order
                .iter()
                .map(|&k| (sandbox.on(NODE_ATTACHMENTS[k].0), confs[k].as_path()))
                .collect()
        })
        .collect();
    let before = cx.requests_by_kind()?;
    let calls = all_at_once(cx, &sequences, command == "DEL")?;
    let mut by_kind = cx.requests_by_kind()?;
    for (kind, n) in by_kind.iter_mut() {
        *n -= before.get(kind).copied().unwrap_or(0);
    }
    by_kind.retain(|_, n| *n > 0);
    let requests = by_kind.values().sum();
    let mut failures = Vec::new();
    for (pod, calls) in pods.iter().zip(&calls) {
        for (&k, call) in order.iter().zip(calls) {
            let checked = if command == "ADD" {
                expect_add("", call)
            } else {
                expect_del("", call)
            };
            if let Err(e) = checked {
                failures.push(format!("{} {}:{e}", pod.name, NODE_ATTACHMENTS[k].0));
            }
        }
    }
    Ok(Wave {
        total: span(calls.iter().flatten()),
        pod: stats(&calls.iter().map(span).collect::<Vec<_>>()),
        requests,
        by_kind,
        failures,
    })
}

/// The links of a network namespace: name to MAC.
fn link_macs(ns: &Netns) -> R<BTreeMap<String, String>> {
    let out = try_sh("ip", &["-n", &ns.name, "-j", "link", "show"])?;
    let links: Value = serde_json::from_str(&out).map_err(|e| format!("ip -j link: {e}"))?;
    Ok(links
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            let field = |k: &str| l[k].as_str().unwrap_or_default().to_string();
            (field("ifname"), field("address"))
        })
        .collect())
}

/// After the ADDs: every pod has exactly lo and its attachments' interfaces, each with the MAC
/// of its own VMI (MACs are unique on the node, so no VMI serves two interfaces), and the
/// agent has every VMI of these pods registered.
pub(crate) fn check_attached(sim: &Sim, pods: &[PodSpec], nss: &[Netns]) -> R<Vec<String>> {
    let mut problems = Vec::new();
    for (pod, ns) in pods.iter().zip(nss) {
        let mut got = link_macs(ns)?;
        got.remove("lo");
        let want: BTreeMap<String, String> = NODE_ATTACHMENTS
            .iter()
            .zip(&pod.vmis)
            .map(|((ifname, _, _), vmi)| (ifname.to_string(), vmi.mac.clone()))
            .collect();
        if got != want {
            problems.push(format!(
                "{}: interfaces {got:?}, expected {want:?}",
                pod.name
            ));
        }
    }
    let registered = registered_vmis(sim);
    let missing = pods
        .iter()
        .flat_map(|p| &p.vmis)
        .filter(|v| !registered.contains(&v.uuid))
        .count();
    if missing > 0 {
        problems.push(format!("{missing} VMIs not registered with the agent"));
    }
    Ok(problems)
}

/// The VMIs the agent has registered.
pub(crate) fn registered_vmis(sim: &Sim) -> BTreeSet<String> {
    let ports = sim.get("/sim/ports");
    ports
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["vmi-uuid"].as_str().map(str::to_string))
        .collect()
}

/// After the DELs: only lo in the pods and in the node (no host end left), nothing in the
/// state directory but its (empty) lock directory, no VMI of these pods registered.
pub(crate) fn check_nothing_left(
    sim: &Sim,
    pods: &[PodSpec],
    nss: &[Netns],
    state: &Path,
) -> R<Vec<String>> {
    let mut problems = Vec::new();
    let host: Vec<String> = fs::read_dir("/sys/class/net")
        .map_err(|e| format!("/sys/class/net: {e}"))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lo")
        .collect();
    if !host.is_empty() {
        problems.push(format!("links left in the node: {host:?}"));
    }
    for (pod, ns) in pods.iter().zip(nss) {
        let names: Vec<String> = link_macs(ns)?.into_keys().collect();
        if names != ["lo"] {
            problems.push(format!("{}: left {names:?}", pod.name));
        }
    }
    let mut left = Vec::new();
    files_under(state, &mut left);
    left.retain(|p| p != &state.join(".locks") && p != &state.join(".budget"));
    if !left.is_empty() {
        problems.push(format!("left in the state directory: {left:?}"));
    }
    let registered = registered_vmis(sim);
    let still = pods
        .iter()
        .flat_map(|p| &p.vmis)
        .filter(|v| registered.contains(&v.uuid))
        .count();
    if still > 0 {
        problems.push(format!("{still} VMIs still registered with the agent"));
    }
    Ok(problems)
}

/// Every path below `dir`, directories included.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
    {
        let path = e.path();
        out.push(path.clone());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            files_under(&path, out);
        }
    }
}

// ---------------------------------------------------------------- 8: readiness lag

pub(crate) struct Ready {
    /// (ready moment after the ADD started, lag after the ready moment), ms.
    pub(crate) samples: Vec<(f64, f64)>,
    pub(crate) lag: Stats,
    /// The lag's two parts: from the ready moment to the poll that saw it (the simulator's
    /// first 200 for the VMI), and from there to the ADD's return (the rest of the ADD).
    pub(crate) seen: Stats,
    pub(crate) rest: Stats,
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
    let part = |k: usize| stats(&samples.iter().map(|s| s[k]).collect::<Vec<_>>());
    let lags: Vec<f64> = samples.iter().map(|s| s[1]).collect();
    // Every pod ran (or the phase failed above): its delay once, its lag once.
    let delays: u64 = cx.ready_pods.iter().map(ip_delay_ms).sum();
    let waiting_s = (delays as f64 + lags.iter().sum::<f64>()) / 1000.0;
    Ok(Ready {
        samples: samples.iter().map(|s| (s[0], s[1])).collect(),
        lag: stats(&lags),
        seen: part(2),
        rest: part(3),
        requests,
        waiting_s,
    })
}

/// The agent has an IP configuration only for a registered port, `ip-delay-ms` after the
/// registration: the simulator reports when the plugin registered the VMI and when it first
/// answered with its IP configuration (CLOCK_MONOTONIC, the clock behind `Instant`), so the
/// ready moment and the poll that saw it are known exactly. ms: the ready moment after the ADD
/// started, the lag, its part until that poll, its part after.
pub(crate) fn ready_once(cx: &Ctx, ns: &Netns, pod: &PodSpec, scratch: &Path) -> R<[f64; 4]> {
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
    let ready = clock("sim-registered-ns")? + Duration::from_millis(ip_delay_ms(pod));
    let seen = clock("sim-ip-answered-ns")?;
    let signed = |a: Instant, b: Instant| if a >= b { ms(a - b) } else { -ms(b - a) };
    let del = env
        .with("DEL")
        .run(&cx.opts.plugin, &cx.ours_conf, scratch)?;
    expect_del("readiness", &del)?;
    Ok([
        signed(ready, add.start),
        signed(add.end, ready),
        signed(seen, ready),
        signed(add.end, seen),
    ])
}

/// When a one-VMI pod's IP configuration comes, ms after its registration.
fn ip_delay_ms(pod: &PodSpec) -> u64 {
    pod.vmis[0].extra["ip-delay-ms"].as_u64().unwrap_or(0)
}
