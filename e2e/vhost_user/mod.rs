//! vhost-user attachments for DPDK pods (docs/vhost-user.md), end to end: the release binary on
//! a DPDK node (a `dpdk_netlink` in the vRouter's socket directory, as vrouter-dpdk makes it),
//! the simulator's `POST /port` route and its vrouter-dpdk stand-in, and Debian's
//! `dpdk-testpmd` as the application in the pod and as the vRouter's side.
//!
//! By area: `attach` (what ADD makes and refuses: packets across the plugin's socket, the
//! vRouter's connection, nodes and paths refused before anything, a pod mixing vhost-user, veth
//! and macvlan, a repeated network, `netconf/dpdk.yaml`, thick mode, a pod's symlink in place of
//! its socket), `recovery` (what releases or recovers an attachment: GC and the sweep, a DEL
//! while the application listens, SIGKILL at every step, an agent restart, `inspect`, an ADD
//! that fails after `POST /port`). This module holds the DPDK node they share, which
//! `vhost_hardening` uses too.

mod attach;
mod recovery;

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use contrail_testkit::*;
use serde_json::{Value, json};

const BOUND: Duration = Duration::from_secs(60);

/// A pod on a DPDK node: the vRouter's socket directory, the root of the pods' vhost-user
/// directories and the device-info directory are the test's, the pod mounts its directory at
/// [`APP_SOCKET_DIR`].
pub(crate) struct Dpdk {
    pub(crate) fx: Fixture,
    pub(crate) vrouter: TempDir,
    /// `vhost-dir` (`<vhost>/pods`), a tmpfs that follows no symlink, as a node mounts it;
    /// unmounted before `vhost` goes.
    guard: Option<Guard>,
    pub(crate) vhost: TempDir,
    pub(crate) devinfo: TempDir,
    /// Where the simulator's vrouter-dpdk stand-in looks, when testpmd plays that part instead.
    _elsewhere: TempDir,
    /// The simulator's switches, for a restart.
    sim_args: Vec<String>,
}

impl Dpdk {
    /// With the simulator's vrouter-dpdk stand-in connecting to the node's `uvh_vif_` links
    /// (`standin`), or to an unused directory (testpmd is the vRouter's side).
    pub(crate) fn new(vmis: Vec<VmiSpec>, standin: bool) -> Dpdk {
        Dpdk::with_sim(PodSpec::new(vmis), standin, &[])
    }

    /// [`Dpdk::new`] with more simulator switches.
    fn with_sim(pod: PodSpec, standin: bool, extra: &[&str]) -> Dpdk {
        Dpdk::with_pods(vec![pod], standin, extra)
    }

    /// [`Dpdk::with_sim`] on a node with `pods`; the fixture's pod is the first.
    pub(crate) fn with_pods(pods: Vec<PodSpec>, standin: bool, extra: &[&str]) -> Dpdk {
        enter_node();
        let (vrouter, vhost, devinfo, elsewhere) = (
            TempDir::new(),
            TempDir::new(),
            TempDir::new(),
            TempDir::new(),
        );
        std::fs::write(vrouter.0.join("dpdk_netlink"), "").unwrap();
        let watched = if standin { &vrouter.0 } else { &elsewhere.0 };
        let mut sim_args = dpdk_args(watched);
        sim_args.extend(extra.iter().map(|a| a.to_string()));
        let guard = Some(Guard::mount(&vhost.0.join("pods")));
        let args: Vec<&str> = sim_args.iter().map(String::as_str).collect();
        let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &args);
        let mut fx = Fixture {
            pod: pods[0].clone(),
            node: Node::new(&sim),
            sim,
            ns: Netns::new(),
            cid: uuid(),
        };
        fx.set("vrouter-socket-dir", json!(vrouter.0))
            .set("vhost-dir", json!(vhost.0.join("pods")))
            .set("vhost-pod-dir", json!(APP_SOCKET_DIR))
            .set("device-info-dir", json!(devinfo.0.join("cni")));
        Dpdk {
            fx,
            vrouter,
            guard,
            vhost,
            devinfo,
            _elsewhere: elsewhere,
            sim_args,
        }
    }

    /// A network's config asking for vhost-user, as its NetworkAttachmentDefinition would.
    pub(crate) fn conf(&self, network: &str) -> Value {
        let mut c = self.fx.conf(network);
        c["contrail"] = json!({"interface-type": "vhost-user"});
        c
    }

    pub(crate) fn add(&self, ifname: &str, network: &str) -> Value {
        self.fx
            .call("ADD", ifname, &self.conf(network))
            .assert_ok()
            .json()
    }

    pub(crate) fn del(&self, ifname: &str, network: &str) {
        self.fx.call("DEL", ifname, &self.conf(network)).assert_ok();
    }

    /// CHECK with the ADD's result as prevResult.
    fn check_ok(&self, ifname: &str, prev: &Value) {
        let mut conf = self.conf("dpdk-net");
        conf["prevResult"] = prev.clone();
        self.fx.call("CHECK", ifname, &conf).assert_ok();
    }

    /// The pod's directory under `vhost-dir`.
    pub(crate) fn pod_dir(&self) -> PathBuf {
        self.vhost.0.join("pods").join(&self.fx.pod.uuid)
    }

    /// The link vrouter-dpdk connects to for VMI `k`.
    pub(crate) fn link(&self, k: usize) -> PathBuf {
        let tap = host_ifname(&self.fx.pod.vmis[k].uuid);
        self.vrouter.0.join(format!("uvh_vif_{tap}"))
    }

    /// The `uvh_vif_` links in the vRouter's socket directory.
    pub(crate) fn links(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.vrouter.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("uvh_vif_"))
            .collect();
        v.sort();
        v
    }

    /// The registrations by route: (vmi, route, transport).
    fn routes(&self) -> Vec<(String, String, String)> {
        let mut v: Vec<(String, String, String)> = self
            .fx
            .sim
            .get("/sim/ports")
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let vmi = p["vmi-uuid"].as_str().or(p["id"].as_str()).unwrap();
                let s = |k: &str| p[k].as_str().unwrap().to_string();
                (vmi.to_string(), s("sim-route"), s("sim-transport"))
            })
            .collect();
        v.sort();
        v
    }

    /// Nothing of the pod anywhere: no link, no pod directory, no registration by either
    /// route, no state, nothing in the netns, no device-info file.
    #[track_caller]
    pub(crate) fn assert_nothing_left(&self) {
        self.fx.assert_nothing_left();
        self.assert_node_clean();
    }

    /// [`Dpdk::assert_nothing_left`] of a pod whose netns is gone.
    #[track_caller]
    pub(crate) fn assert_node_clean(&self) {
        assert_eq!(self.fx.sim.ports(), [], "port left registered");
        assert!(!self.fx.node.pod_dir_exists(&self.fx.pod), "state left");
        assert_eq!(self.links(), [] as [String; 0], "uvh_vif_ links left");
        assert!(!self.pod_dir().exists(), "the pod's directory is left");
        let devinfo: Vec<_> = std::fs::read_dir(self.devinfo.0.join("cni"))
            .into_iter()
            .flatten()
            .collect();
        assert!(devinfo.is_empty(), "device-info left: {devinfo:?}");
        assert_eq!(self.fx.sim.violations(), [] as [Value; 0]);
    }
}

/// A tmpfs mounted `nosymfollow` (the node's `vhost-dir`), unmounted on drop.
struct Guard(PathBuf);

impl Guard {
    fn mount(dir: &Path) -> Guard {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.to_str().unwrap();
        let opts = "nosymfollow,nodev,noexec,nosuid,mode=0755";
        sh("mount", &["-t", "tmpfs", "-o", opts, "tmpfs", path]);
        Guard(dir.to_path_buf())
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = try_sh("umount", &["-l", self.0.to_str().unwrap()]);
    }
}

fn is_link(path: &Path) -> bool {
    path.symlink_metadata().is_ok_and(|m| m.is_symlink())
}

pub(crate) fn is_socket(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `install --watch` on the node's file, sweeping every second without a grace period.
pub(crate) fn sweeper(d: &Dpdk) -> (TempDir, Watch) {
    let host = TempDir::new();
    let conf = host.0.join("10-contrail.conf");
    std::fs::copy(d.fx.node.node_file(), &conf).unwrap();
    let watch = Watch::start(
        &host.0.join("bin"),
        &host.0.join("net.d"),
        &conf,
        &["--sweep-interval", "1", "--sweep-grace", "0"],
    );
    (host, watch)
}

/// The requests the agent served so far, by method and route (any outcome).
fn requests_by_route(d: &Dpdk) -> std::collections::BTreeMap<String, u64> {
    let mut by = std::collections::BTreeMap::new();
    for (key, n) in d.fx.sim.get("/sim/requests").as_object().unwrap() {
        let route = key.rsplit_once(' ').map_or(key.as_str(), |(r, _)| r);
        *by.entry(route.to_string()).or_default() += n.as_u64().unwrap();
    }
    by
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}
