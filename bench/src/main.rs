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

mod measure;
mod phases;
mod plot;
mod report;
mod stats;
mod storm;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use contrail_testkit::{Netns, Node, PodSpec, Sim, TempDir, VmiSpec, uuid};
use serde_json::{Value, json};

use measure::CniEnv;
use phases::{Mount, compare, disk, full_node, one_attachment, parallel, readiness, thick};
use report::{Report, kb, loadavg, markdown, write_markdown};
use stats::Rng;

type R<T> = Result<T, String>;

const BEGIN: &str = "<!-- scripts/bench: generated section, rewritten on every run -->";
const END: &str = "<!-- scripts/bench: end of generated section -->";
/// Container-side address and gateway of every single-interface pod.
const POD_ADDR: &str = "10.1.0.11";
const POD_GW: &str = "10.1.0.1";
const POD_MAC: [u8; 6] = [0x02, 0xbe, 0x4c, 0x00, 0x00, 0x0b];
const THICK_SIZES: [usize; 4] = [1, 4, 16, 64];
/// A full node's pod, as Multus calls the plugin for it: (CNI_IFNAME, the VMI's network, the
/// network name in the config). eth0 is the cluster network's delegate; net-a is attached twice.
const NODE_ATTACHMENTS: [(&str, &str, &str); 4] = [
    ("eth0", "default", "contrail-k8s-cni"),
    ("net1", "net-a", "net-a"),
    ("net2", "net-a", "net-a"),
    ("net3", "net-b", "net-b"),
];
/// A full node's VMIs get their IP configuration at a random moment up to this long after
/// their registration.
const NODE_IP_DELAY_MS: u64 = 300;

// ------------------------------------------------------------------------------ options

/// The benchmark of the release binary (scripts/bench runs it with the paths it built).
#[derive(Parser)]
#[command(name = "bench")]
struct Opts {
    /// The plugin's release binary.
    #[arg(long = "plugin", value_name = "BIN")]
    plugin: PathBuf,
    /// The same built with `--features thick`.
    #[arg(long = "thick-plugin", value_name = "BIN")]
    thick: PathBuf,
    /// The build before the node's request budget, with its fixed 21 ms poll period (a
    /// section 9 policy).
    #[arg(long = "previous-plugin", value_name = "BIN")]
    previous: PathBuf,
    /// The build before issue 38 (a section 9 policy).
    #[arg(long = "before-plugin", value_name = "BIN")]
    before: PathBuf,
    /// The agent simulator.
    #[arg(long, value_name = "BIN")]
    sim: PathBuf,
    /// Debian's reference plugins (ptp, static).
    #[arg(long, value_name = "DIR", default_value = "/usr/lib/cni")]
    cni_dir: PathBuf,
    /// The repository (for the git revision and the release profile).
    #[arg(long, value_name = "DIR", default_value = ".")]
    repo: PathBuf,
    #[arg(long, value_name = "FILE", default_value = "BENCHMARKS.md")]
    md: PathBuf,
    #[arg(long, value_name = "FILE", default_value = "benchmarks/latency.svg")]
    svg: PathBuf,
    /// A smoke run of every phase, for working on the bench itself.
    #[arg(long)]
    quick: bool,
    /// Another build of the plugin: ADD, DEL and RSS of both, interleaved, printed only.
    #[arg(long, value_name = "BIN")]
    compare: Option<PathBuf>,
    /// Section 9 only, printed only: for working on the node's request budget.
    #[arg(long)]
    storm_only: bool,
}

impl Opts {
    fn check(&self) -> R<()> {
        for p in [
            &self.plugin,
            &self.thick,
            &self.previous,
            &self.before,
            &self.sim,
        ] {
            if !p.exists() {
                return Err(format!(
                    "{} does not exist (scripts/bench builds it)",
                    p.display()
                ));
            }
        }
        Ok(())
    }

    fn ptp(&self) -> PathBuf {
        self.cni_dir.join("ptp")
    }
}

/// How much to measure: the full run, or a smoke test for working on the bench itself.
struct Sizes {
    runs: usize,
    warmup: usize,
    version_runs: usize,
    thick_reps: [usize; 4],
    parallel: usize,
    ready: usize,
    ready_workers: usize,
    rss_runs: usize,
    /// ADD+DEL runs per filesystem of the state directory.
    disk_runs: usize,
    /// Pods of the full node, one round each.
    node_sizes: Vec<usize>,
    /// Pods of section 9's storm, and the quiet node's samples.
    storm_pods: usize,
    quiet: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                runs: 20,
                warmup: 2,
                version_runs: 20,
                thick_reps: [4, 3, 2, 2],
                parallel: 16,
                ready: 12,
                ready_workers: 4,
                rss_runs: 3,
                disk_runs: 10,
                node_sizes: vec![1, 4, 8],
                storm_pods: 8,
                quiet: 4,
            }
        } else {
            Sizes {
                runs: 200,
                warmup: 10,
                version_runs: 200,
                thick_reps: [30, 20, 12, 8],
                parallel: 64,
                ready: 160,
                ready_workers: 4,
                rss_runs: 20,
                disk_runs: 100,
                node_sizes: vec![1, 10, 50, 110],
                storm_pods: 110,
                quiet: 40,
            }
        }
    }
}

// ------------------------------------------------------------------------------ interruption

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT/SIGTERM only set a flag: the loops stop at the next step and every guard runs.
fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn check_interrupt() -> R<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

// ------------------------------------------------------------------------------ the simulated pods

/// A pod of `n` VMIs: index 0 on the cluster network (10.1.0.11/24 via 10.1.0.1, as ptp's
/// config), the rest on net-a; each VMI's IP configuration comes `ip_delay_ms` after its
/// registration.
fn pod(name: String, n: usize, ip_delay_ms: u64) -> PodSpec {
    let vmis = (1..=n)
        .map(|k| {
            let network = if k == 1 { "default" } else { "net-a" };
            VmiSpec::new(network, k as u8).with("ip-delay-ms", json!(ip_delay_ms))
        })
        .collect();
    PodSpec {
        name,
        ..PodSpec::new(vmis)
    }
}

/// Pod `i` of the full node: a VMI per attachment of `NODE_ATTACHMENTS`, each with its IP
/// configuration a random 0..NODE_IP_DELAY_MS after its registration and a MAC that names the
/// pod and the attachment, so that no two VMIs of the node share one.
fn node_pod(i: usize, rng: &mut Rng) -> PodSpec {
    let vmis = NODE_ATTACHMENTS
        .iter()
        .enumerate()
        .map(|(k, (_, network, _))| {
            let mut v = VmiSpec::new(network, k as u8 + 1)
                .with("ip-delay-ms", json!(rng.below(NODE_IP_DELAY_MS)));
            v.mac = format!("02:fe:{:02x}:{:02x}:00:{:02x}", i >> 8, i & 0xff, k + 1);
            v
        })
        .collect();
    PodSpec {
        namespace: "default".into(),
        name: format!("node-{i}"),
        ..PodSpec::new(vmis)
    }
}

/// The config Multus hands the plugin for `network`, written in `dir`: only what a
/// NetworkAttachmentDefinition says (the node's settings are in the node-wide file).
fn stdin_conf(dir: &Path, node: &Node, network: &str) -> R<PathBuf> {
    write_json(
        dir.join(format!("net-{network}.json")),
        &node.netconf("1.0.0", network),
    )
}

fn write_json(path: PathBuf, v: &Value) -> R<PathBuf> {
    fs::write(&path, v.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// A node setup: its node-wide file names the simulator, keeps the state in `state` and the
/// log in its own temporary directory, and leaves everything else at the plugin's defaults
/// (testkit's `Node` sets short waits and debug logging for the tests: not what a node runs).
pub(crate) fn node_in(sim: &Sim, state: &Path) -> Node {
    let mut node = Node::new(sim);
    for key in ["poll-timeout", "poll-retries", "log-level"] {
        node.set(key, Value::Null);
    }
    node.set("config-dir", json!(state));
    node
}

// ------------------------------------------------------------------------------ the bench

/// Everything the phases share.
struct Ctx {
    opts: Opts,
    sizes: Sizes,
    /// The node's disk: ext4 on a loop device. Declared before `dir`, which holds its image, so
    /// that it is unmounted first.
    ext4: Mount,
    /// The node's `vhost-dir`: a tmpfs that follows no symlink, as the plugin requires; held
    /// until the end, unmounted before `dir` goes.
    _vhost_dir: Mount,
    dir: TempDir,
    sim: Sim,
    /// The node of every phase but thick mode (and section 4's other filesystems): the state
    /// directory on `ext4`.
    node: Node,
    /// The same in thick mode, with a state directory of its own on `ext4`.
    thick_node: Node,
    /// An empty static program: the floor of a process's start-up.
    empty: PathBuf,
    /// Config files on stdin, by purpose.
    ours_conf: PathBuf,
    /// The same network asking for a vhost-user attachment (the node says it is DPDK).
    vhost_conf: PathBuf,
    /// The node's vrouter-dpdk socket directory, where a vhost-user ADD makes its link.
    vrouter_dir: PathBuf,
    ptp_conf: PathBuf,
    version_conf: PathBuf,
    bench_pod: PodSpec,
    thick_pods: Vec<PodSpec>,
    parallel_pods: Vec<PodSpec>,
    ready_pods: Vec<PodSpec>,
    node_pods: Vec<PodSpec>,
    storm_pods: Vec<PodSpec>,
    load_start: String,
}

impl Ctx {
    /// A call on `node`: its node-wide file is the plugin's `CONTRAIL_CNI_CONF_DIR`.
    fn env(&self, node: &Node, command: &'static str, netns: &Netns, pod: &str) -> CniEnv {
        CniEnv {
            command,
            container_id: uuid().replace('-', ""),
            netns: netns.path(),
            ifname: "eth0".into(),
            pod: pod.to_string(),
            cni_path: self.opts.cni_dir.to_string_lossy().into_owned(),
            conf_dir: node.conf_dir.0.to_string_lossy().into_owned(),
            pod_uid: None,
        }
    }

    fn scratch(&self, tag: &str) -> PathBuf {
        self.dir.0.join("io").join(tag)
    }

    /// The config Multus hands the plugin for `network` (see [`stdin_conf`]).
    fn stdin(&self, network: &str) -> R<PathBuf> {
        stdin_conf(&self.dir.0, &self.node, network)
    }

    /// Every request the simulator served so far, its own (`/sim/`) excepted.
    fn agent_requests(&self) -> R<u64> {
        self.sim.get("/sim/stats")["requests"]
            .as_u64()
            .ok_or_else(|| "the simulator has no GET /sim/stats (rebuild it)".to_string())
    }

    /// The same by "METHOD route status" (`GET /sim/requests`).
    fn requests_by_kind(&self) -> R<BTreeMap<String, u64>> {
        serde_json::from_value(self.sim.get("/sim/requests"))
            .map_err(|e| format!("the simulator's GET /sim/requests (rebuild it): {e}"))
    }
}

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
/// machine's, in one run.
fn node_under_load(cx: &Ctx) -> R<(Vec<storm::Storm>, Vec<storm::Quiet>)> {
    use storm::{Policy, Role};
    let o = &cx.opts;
    let policies = [
        (Role::This, Some(&o.plugin)),
        (Role::ThisBusy, Some(&o.plugin)),
        (Role::Before, Some(&o.before)),
        (Role::FixedPeriod, Some(&o.previous)),
        (Role::Legacy, None),
    ];
    let nss: Vec<Netns> = cx.storm_pods.iter().map(|_| Netns::new()).collect();
    let mut storms = Vec::new();
    let mut quiets = Vec::new();
    for (role, bin) in policies {
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
        storms.push(storm::storm(cx, policy, &cx.storm_pods, &nss)?);
        if role != Role::ThisBusy {
            eprintln!("  quiet node: {}", policy.name());
            quiets.push(storm::quiet(cx, policy, cx.sizes.quiet)?);
        }
    }
    Ok((storms, quiets))
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
        return compare(&cx, other);
    }
    if cx.opts.storm_only {
        eprintln!("bench: 9. the node under load, alone");
        let (storms, quiets) = node_under_load(&cx)?;
        eprintln!("{}", report::load_only(&storms, &quiets));
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
    let (storms, quiets) = node_under_load(&cx)?;
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
        storms,
        quiets,
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
