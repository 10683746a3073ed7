//! What every phase shares: the constants of the simulated pods, the options and the run's
//! sizes, the interruption flag, the node setups and the context (`Ctx`) the phases run in.

use crate::error::R;
use crate::measure::CniEnv;
use crate::mount::Mount;
use crate::stats::Rng;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use contrail_testkit::{Netns, Node, PodSpec, Sim, TempDir, VmiSpec, uuid};
use serde_json::{Value, json};

/// Container-side address and gateway of every single-interface pod.
pub(crate) const POD_ADDR: &str = "10.1.0.11";
pub(crate) const POD_GW: &str = "10.1.0.1";
pub(crate) const POD_MAC: [u8; 6] = [0x02, 0xbe, 0x4c, 0x00, 0x00, 0x0b];
pub(crate) const THICK_SIZES: [usize; 4] = [1, 4, 16, 64];
/// A full node's pod, as Multus calls the plugin for it: (CNI_IFNAME, the VMI's network, the
/// network name in the config). eth0 is the cluster network's delegate; net-a is attached twice.
pub(crate) const NODE_ATTACHMENTS: [(&str, &str, &str); 4] = [
    ("eth0", "default", "contrail-k8s-cni"),
    ("net1", "net-a", "net-a"),
    ("net2", "net-a", "net-a"),
    ("net3", "net-b", "net-b"),
];
/// A full node's VMIs get their IP configuration at a random moment up to this long after
/// their registration.
pub(crate) const NODE_IP_DELAY_MS: u64 = 300;

// ------------------------------------------------------------------------------ options

/// The benchmark of the release binary (scripts/bench runs it with the paths it built).
#[derive(Parser)]
#[command(name = "bench")]
pub(crate) struct Opts {
    /// The plugin's release binary.
    #[arg(long = "plugin", value_name = "BIN")]
    pub(crate) plugin: PathBuf,
    /// The same built with `--features thick`.
    #[arg(long = "thick-plugin", value_name = "BIN")]
    pub(crate) thick: PathBuf,
    /// The build before the node's request budget, with its fixed 21 ms poll period (a
    /// section 9 policy).
    #[arg(long = "previous-plugin", value_name = "BIN")]
    pub(crate) previous: PathBuf,
    /// The build before issue 38 (a section 9 policy).
    #[arg(long = "before-plugin", value_name = "BIN")]
    pub(crate) before: PathBuf,
    /// The agent simulator.
    #[arg(long, value_name = "BIN")]
    pub(crate) sim: PathBuf,
    /// Debian's reference plugins (ptp, static).
    #[arg(long, value_name = "DIR", default_value = "/usr/lib/cni")]
    pub(crate) cni_dir: PathBuf,
    /// The repository (for the git revision and the release profile).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub(crate) repo: PathBuf,
    #[arg(long, value_name = "FILE", default_value = "BENCHMARKS.md")]
    pub(crate) md: PathBuf,
    #[arg(long, value_name = "FILE", default_value = "benchmarks/latency.svg")]
    pub(crate) svg: PathBuf,
    /// A smoke run of every phase, for working on the bench itself.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Another build of the plugin: ADD, DEL and RSS of both, interleaved, printed only.
    #[arg(long, value_name = "BIN")]
    pub(crate) compare: Option<PathBuf>,
    /// Section 9 only, printed only: for working on the node's request budget.
    #[arg(long)]
    pub(crate) storm_only: bool,
}

impl Opts {
    pub(crate) fn check(&self) -> R<()> {
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

    pub(crate) fn ptp(&self) -> PathBuf {
        self.cni_dir.join("ptp")
    }
}

/// How much to measure: the full run, or a smoke test for working on the bench itself.
pub(crate) struct Sizes {
    pub(crate) runs: usize,
    pub(crate) warmup: usize,
    pub(crate) version_runs: usize,
    pub(crate) thick_reps: [usize; 4],
    pub(crate) parallel: usize,
    pub(crate) ready: usize,
    pub(crate) ready_workers: usize,
    pub(crate) rss_runs: usize,
    /// ADD+DEL runs per filesystem of the state directory.
    pub(crate) disk_runs: usize,
    /// Pods of the full node, one round each.
    pub(crate) node_sizes: Vec<usize>,
    /// Pods of section 9's storm, and the quiet node's samples.
    pub(crate) storm_pods: usize,
    pub(crate) quiet: usize,
    /// Interleaved pairs of storms (this build, a poll every 21 ms) for the storm's paired row:
    /// 6 is the fewest whose min to max is a 95% interval of the median.
    pub(crate) storm_pairs: usize,
}

impl Sizes {
    pub(crate) fn new(quick: bool) -> Sizes {
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
                storm_pairs: 1,
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
                storm_pairs: 6,
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
pub(crate) fn catch_signals() {
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

pub(crate) fn check_interrupt() -> R<()> {
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
pub(crate) fn pod(name: String, n: usize, ip_delay_ms: u64) -> PodSpec {
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
pub(crate) fn node_pod(i: usize, rng: &mut Rng) -> PodSpec {
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
pub(crate) fn stdin_conf(dir: &Path, node: &Node, network: &str) -> R<PathBuf> {
    write_json(
        dir.join(format!("net-{network}.json")),
        &node.netconf("1.0.0", network),
    )
}

pub(crate) fn write_json(path: PathBuf, v: &Value) -> R<PathBuf> {
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

// ------------------------------------------------------------------------------ the context

/// Everything the phases share.
pub(crate) struct Ctx {
    pub(crate) opts: Opts,
    pub(crate) sizes: Sizes,
    /// The node's disk: ext4 on a loop device. Declared before `dir`, which holds its image, so
    /// that it is unmounted first.
    pub(crate) ext4: Mount,
    /// The node's `vhost-dir`: a tmpfs that follows no symlink, as the plugin requires; held
    /// until the end, unmounted before `dir` goes.
    pub(crate) _vhost_dir: Mount,
    pub(crate) dir: TempDir,
    pub(crate) sim: Sim,
    /// The node of every phase but thick mode (and section 4's other filesystems): the state
    /// directory on `ext4`.
    pub(crate) node: Node,
    /// The same in thick mode, with a state directory of its own on `ext4`.
    pub(crate) thick_node: Node,
    /// An empty static program: the floor of a process's start-up.
    pub(crate) empty: PathBuf,
    /// Config files on stdin, by purpose.
    pub(crate) ours_conf: PathBuf,
    /// The same network asking for a vhost-user attachment (the node says it is DPDK).
    pub(crate) vhost_conf: PathBuf,
    /// The node's vrouter-dpdk socket directory, where a vhost-user ADD makes its link.
    pub(crate) vrouter_dir: PathBuf,
    pub(crate) ptp_conf: PathBuf,
    pub(crate) version_conf: PathBuf,
    pub(crate) bench_pod: PodSpec,
    pub(crate) thick_pods: Vec<PodSpec>,
    pub(crate) parallel_pods: Vec<PodSpec>,
    pub(crate) ready_pods: Vec<PodSpec>,
    pub(crate) node_pods: Vec<PodSpec>,
    pub(crate) storm_pods: Vec<PodSpec>,
    pub(crate) load_start: String,
}

impl Ctx {
    /// A call on `node`: its node-wide file is the plugin's `CONTRAIL_CNI_CONF_DIR`.
    pub(crate) fn env(
        &self,
        node: &Node,
        command: &'static str,
        netns: &Netns,
        pod: &str,
    ) -> CniEnv {
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

    pub(crate) fn scratch(&self, tag: &str) -> PathBuf {
        self.dir.0.join("io").join(tag)
    }

    /// The config Multus hands the plugin for `network` (see [`stdin_conf`]).
    pub(crate) fn stdin(&self, network: &str) -> R<PathBuf> {
        stdin_conf(&self.dir.0, &self.node, network)
    }

    /// Every request the simulator served so far, its own (`/sim/`) excepted.
    pub(crate) fn agent_requests(&self) -> R<u64> {
        self.sim.get("/sim/stats")["requests"]
            .as_u64()
            .ok_or_else(|| "the simulator has no GET /sim/stats (rebuild it)".to_string())
    }

    /// The same by "METHOD route status" (`GET /sim/requests`).
    pub(crate) fn requests_by_kind(&self) -> R<BTreeMap<String, u64>> {
        serde_json::from_value(self.sim.get("/sim/requests"))
            .map_err(|e| format!("the simulator's GET /sim/requests (rebuild it): {e}"))
    }
}
