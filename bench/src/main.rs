//! Benchmark of the release binary, run by `scripts/bench` (not part of the test suite).
//!
//! Usage: `bench --help` (scripts/bench passes the paths). `--compare` measures only ADD, DEL
//! and peak RSS of `--plugin` against another build of it, interleaved, and prints the result
//! without writing anything: for trying a change.
//!
//! Everything runs inside a private "node" (`contrail_testkit::enter_node`: a network namespace
//! and a mount namespace with its own sysfs and /run/netns) that this program enters at start,
//! so host-side veths, ptp's `ip_forward`, the simulator's loopback, the pods' netns mounts and
//! the filesystems it mounts never touch the machine's own, and all of it vanishes with the
//! process. The node's settings are in node-wide files (`CONTRAIL_CNI_CONF_DIR`, one per
//! setup: `contrail_testkit::Node`); stdin carries only what a NetworkAttachmentDefinition
//! would. The state directory is on ext4 on a loop device, as on a node, except in section 4's
//! comparison rows. One agent simulator answers at once (or after the delays a phase gives its
//! pods) and counts the requests it serves, by kind (`GET /sim/requests`). Pod namespaces,
//! mounts, the temporary directories and the simulator are removed by guards, also on
//! SIGINT/SIGTERM. Plugins are executed the way runtimes do (environment + config on stdin),
//! timed from spawn to the reaping `wait4`. Peak RSS is read under ptrace from each process's
//! `/proc/<pid>/status` as it exits (see `traced_rss` for why not `ru_maxrss`).
//!
//! Measured:
//! 1. ADD and DEL of one attachment: contrail-k8s-cni against Debian's ptp + static IPAM doing
//!    the equivalent kernel work, interleaved in one loop with the floor's parts, with the agent
//!    requests of each;
//! 2. the floor of an ADD: an empty static program's start-up, the attachment's netlink
//!    operations in-process (the plugin's own netlink module), and the agent's requests of one
//!    ADD in-process on one kept-alive connection; the DEL's floor is its netlink operations;
//! 3. peak RSS and binary size;
//! 4. the state directory on tmpfs, on the ext4 of the other phases, and in the temporary
//!    directory: ADD and DEL, and their fsyncs;
//! 5. thick mode with 1, 4, 16 and 64 interfaces: time per interface;
//! 6. 64 pods ADDed (then DELed) in parallel, each in its own netns;
//! 7. a full node: 1 to 110 pods with 4 attachments each (a repeated network among them),
//!    each pod's attachments in Multus's order, the pods in parallel, IP configurations at
//!    random moments; every interface checked, nothing left; the agent requests per
//!    attachment, polls apart;
//! 8. readiness lag: the VMI's IP config appears at a random moment, how long after it
//!    does ADD return (the wait for the poll that sees it, and the rest of the ADD), and how
//!    many polls the waiting calls make.
//!
//! Results go to the generated section of BENCHMARKS.md (the text around it is kept) and to
//! an SVG plot. Progress goes to stderr.

mod compare;
mod context;
mod error;
mod measure;
mod mount;
mod phases;
mod plot;
mod report;
mod stats;
mod storm;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use contrail_testkit::{Netns, PodSpec, Sim, TempDir};
use serde_json::json;

use context::{
    Ctx, NODE_ATTACHMENTS, Opts, POD_ADDR, POD_GW, Sizes, THICK_SIZES, catch_signals, node_in,
    node_pod, pod, stdin_conf, write_json,
};
use error::R;
use mount::Mount;
use phases::{
    disk::disk, node::full_node, parallel::parallel, readiness::readiness, single::one_attachment,
    thick::thick,
};
use report::machine::{kb, loadavg};
use report::markdown::{markdown, write_markdown};
use report::results::Report;
use stats::Rng;

// ------------------------------------------------------------------------------ the bench

/// Builds an empty static program (`cc -static`, glibc's libc.a): what starting any process
/// costs at least, with no dynamic loader, as the plugin (a static PIE) has none.
fn build_empty(dir: &Path) -> R<PathBuf> {
    let (src, bin) = (dir.join("empty.c"), dir.join("empty"));
    fs::write(&src, "int main(void) { return 0; }\n").map_err(|e| e.to_string())?;
    contrail_testkit::try_sh(
        "cc",
        &[
            "-static",
            "-O2",
            "-o",
            &bin.to_string_lossy(),
            &src.to_string_lossy(),
        ],
    )?;
    Ok(bin)
}

fn setup(opts: Opts) -> R<Ctx> {
    let load_start = loadavg();
    let sizes = Sizes::new(opts.quick);
    let dir = TempDir::new();
    fs::create_dir_all(dir.0.join("io")).map_err(|e| e.to_string())?;
    let ext4 = Mount::ext4(dir.0.join("ext4.img"), dir.0.join("ext4"))?;
    let empty = build_empty(&dir.0)?;
    let bench_pod = pod("bench".into(), 1, 0);
    let thick_pods: Vec<PodSpec> = THICK_SIZES
        .iter()
        .map(|&n| pod(format!("thick-{n}"), n, 0))
        .collect();
    let parallel_pods: Vec<PodSpec> = (0..sizes.parallel)
        .map(|i| pod(format!("par-{i}"), 1, 0))
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let ready_pods: Vec<PodSpec> = (0..sizes.ready)
        .map(|i| pod(format!("ready-{i}"), 1, rng.below(2000)))
        .collect();
    let mut node_rng = Rng(0x2545_f491_4f6c_dd1d);
    let node_max = sizes.node_sizes.iter().copied().max().unwrap_or(0);
    let node_pods: Vec<PodSpec> = (0..node_max).map(|i| node_pod(i, &mut node_rng)).collect();
    let storm_pods = storm::storm_pods(sizes.storm_pods, &mut Rng(0x5851_f42d_4c95_7f2d));
    let all: Vec<&PodSpec> = std::iter::once(&bench_pod)
        .chain(&thick_pods)
        .chain(&parallel_pods)
        .chain(&ready_pods)
        .chain(&node_pods)
        .collect();
    let sim = Sim::start_with(&opts.sim, &all, &[]);
    let mut node = node_in(&sim, &ext4.dir.join("ports"));
    // A DPDK node too, for vhost-user attachments (keys a veth attachment does not read).
    let vrouter_dir = dir.0.join("vrouter");
    fs::create_dir_all(&vrouter_dir).map_err(|e| e.to_string())?;
    node.set("vrouter-mode", json!("dpdk"))
        .set("vrouter-socket-dir", json!(vrouter_dir))
        .set("vhost-dir", json!(dir.0.join("vhost")));
    let vhost_dir = Mount::tmpfs(dir.0.join("vhost"), ",nosymfollow,mode=0755")?;
    let ours_conf = stdin_conf(&dir.0, &node, "contrail-k8s-cni")?;
    let mut vhost = node.netconf("1.0.0", "contrail-k8s-cni");
    vhost["contrail"] = json!({"interface-type": "vhost-user"});
    let vhost_conf = write_json(dir.0.join("net-vhost-user.json"), &vhost)?;
    let mut thick_node = node_in(&sim, &ext4.dir.join("thick-ports"));
    thick_node.set("mode", json!("thick"));
    // ptp + static doing what contrail-k8s-cni does for one attachment: a veth pair with the
    // container end in the pod, its address, the default route.
    let ptp_conf = write_json(
        dir.0.join("ptp.json"),
        &json!({"cniVersion": "1.0.0", "name": "bench", "type": "ptp", "mtu": 1500,
               "ipam": {"type": "static",
                        "addresses": [{"address": format!("{POD_ADDR}/24"), "gateway": POD_GW}],
                        "routes": [{"dst": "0.0.0.0/0", "gw": POD_GW}]}}),
    )?;
    let version_conf = write_json(dir.0.join("version.json"), &json!({"cniVersion": "1.0.0"}))?;
    Ok(Ctx {
        opts,
        sizes,
        ext4,
        _vhost_dir: vhost_dir,
        dir,
        sim,
        node,
        thick_node,
        empty,
        ours_conf,
        vhost_conf,
        vrouter_dir,
        ptp_conf,
        version_conf,
        bench_pod,
        thick_pods,
        parallel_pods,
        ready_pods,
        node_pods,
        storm_pods,
        load_start,
    })
}

/// Section 9: the storm under each polling policy, and the quiet node under each but the busy
/// machine's, in one run. This build's storm and the one with a poll every 21 ms come first, in
/// `storm_pairs` interleaved pairs (the first pair's are the tables'), for the paired row.
fn node_under_load(cx: &Ctx) -> R<storm::Load> {
    use storm::{Policy, Role};
    let o = &cx.opts;
    let pair = [
        (Role::This, Some(&o.plugin)),
        (Role::FixedPeriod, Some(&o.previous)),
    ];
    let rest = [
        (Role::ThisBusy, Some(&o.plugin)),
        (Role::Before, Some(&o.before)),
        (Role::Legacy, None),
    ];
    let runs = (0..cx.sizes.storm_pairs).flat_map(|_| pair).chain(rest);
    let nss: Vec<Netns> = cx.storm_pods.iter().map(|_| Netns::new()).collect();
    let mut load = storm::Load {
        storms: Vec::new(),
        quiets: Vec::new(),
        pairs: Vec::new(),
    };
    let mut this_whole = None;
    for (role, bin) in runs {
        let policy = Policy {
            role,
            bin: bin.map(PathBuf::as_path),
        };
        eprintln!(
            "  storm: {} pods x {} attachments, {}",
            cx.storm_pods.len(),
            NODE_ATTACHMENTS.len(),
            policy.name()
        );
        let storm = storm::storm(cx, policy, &cx.storm_pods, &nss)?;
        match role {
            Role::This => this_whole = Some(storm.whole_s),
            Role::FixedPeriod => {
                let ours = this_whole
                    .take()
                    .ok_or("a pair without this build's storm")?;
                load.pairs.push((ours, storm.whole_s));
            }
            _ => {}
        }
        if load.storms.iter().any(|s| s.role == role) {
            continue;
        }
        load.storms.push(storm);
        if role != Role::ThisBusy {
            eprintln!("  quiet node: {}", policy.name());
            load.quiets.push(storm::quiet(cx, policy, cx.sizes.quiet)?);
        }
    }
    Ok(load)
}

// ------------------------------------------------------------------------------ main

fn run(opts: Opts) -> R<()> {
    eprintln!("bench: setting up (node netns, simulator, pods)");
    let cx = setup(opts)?;
    if let Some(other) = &cx.opts.compare {
        eprintln!(
            "bench: comparing {} with {}",
            cx.opts.plugin.display(),
            other.display()
        );
        return compare::compare(&cx, other);
    }
    if cx.opts.storm_only {
        eprintln!("bench: 9. the node under load, alone");
        let load = node_under_load(&cx)?;
        eprintln!("{}", report::load::load_only(&load));
        return Ok(());
    }
    eprintln!("bench: 1-3. one attachment: contrail-k8s-cni, ptp + static, raw netlink");
    let single = one_attachment(&cx)?;
    eprintln!("bench: 4. the state directory: tmpfs, ext4 on a loop device, the temp dir");
    let disk = disk(&cx)?;
    eprintln!("bench: 5. thick mode, 1/4/16/64 interfaces");
    let thick = thick(&cx)?;
    eprintln!("bench: 6. {} pods in parallel", cx.parallel_pods.len());
    let parallel = parallel(&cx)?;
    eprintln!("bench: 7. a full node, {:?} pods", cx.sizes.node_sizes);
    let node = full_node(&cx)?;
    eprintln!("bench: 8. readiness lag");
    let ready = readiness(&cx)?;
    eprintln!("bench: 9. the node under load: polling policies");
    let load = node_under_load(&cx)?;
    let sizes_kb = vec![
        ("contrail-k8s-cni".into(), kb(&cx.opts.plugin)),
        (
            "contrail-k8s-cni `--features thick`".into(),
            kb(&cx.opts.thick),
        ),
        ("ptp".into(), kb(&cx.opts.ptp())),
        ("static".into(), kb(&cx.opts.cni_dir.join("static"))),
    ];
    let report = Report {
        single,
        disk,
        thick,
        parallel,
        node,
        ready,
        load,
        sizes_kb,
        warmup: cx.sizes.warmup,
        workers: cx.sizes.ready_workers,
        load_start: cx.load_start.clone(),
    };
    let md = markdown(&cx.opts, &report);
    if let Some(dir) = cx.opts.svg.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    fs::write(&cx.opts.svg, plot::svg(&report))
        .map_err(|e| format!("{}: {e}", cx.opts.svg.display()))?;
    write_markdown(&cx.opts.md, &md)?;
    eprintln!("{md}");
    eprintln!(
        "bench: wrote {} and {}",
        cx.opts.md.display(),
        cx.opts.svg.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    if let Err(e) = opts.check() {
        eprintln!("bench: {e}");
        return ExitCode::from(2);
    }
    // Before any thread exists, so that every thread and child lives in the node.
    contrail_testkit::enter_node();
    catch_signals();
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
