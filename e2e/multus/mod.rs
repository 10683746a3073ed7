//! Multus 4.3.0, the real one (`../shared/peers`), thin and thick, called as a runtime calls its
//! CNI plugin, against the Kubernetes API stand-in (`KubeApi`) that serves the pods and NADs
//! the agent simulator's kube-manager made the VMIs of. Every scenario runs in both modes
//! (`multus::thin::*`, `multus::thick::*`; thick's daemon started once per test) and checks what
//! a user checks: each interface's MAC, addresses and routes in the pod, the agent's ports, the
//! plugin's state files, the host's links, the network-status annotation read back from the
//! API, and that nothing is left at the end.
//!
//! By area: `pods` (mixed pods, DEL with and without Multus's cache, a pod gone from the API, a
//! failing delegate and Multus's rollback, our networks beside another cluster network), `gc`
//! (GC and STATUS through Multus).

mod gc;
mod pods;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;

use contrail_testkit::cluster::Nad;
use contrail_testkit::*;
use serde_json::{Value, json};

/// Each scenario, once per Multus mode: `thin::<name>` and `thick::<name>`.
macro_rules! both_modes {
    ($($area:ident::$name:ident),* $(,)?) => {
        mod thin {
            $(#[test] fn $name() { super::$area::$name(contrail_testkit::MultusMode::Thin) })*
        }
        mod thick {
            $(#[test] fn $name() { super::$area::$name(contrail_testkit::MultusMode::Thick) })*
        }
    };
}

both_modes! {
    pods::mixed_pods_attach_report_and_go,
    pods::a_pod_gone_from_the_api,
    pods::a_failing_delegate_is_rolled_back,
    pods::our_networks_beside_another_cluster_network,
    gc::gc_and_status_reach_the_cluster_network,
}

/// The subnet of the bridge NAD `br` (host-local in a directory of the test's own).
const BRIDGE_SUBNET: &str = "10.99.0";

/// A node with Multus: the agent simulator and the API serving the same pods, our plugin's
/// node, the node's CNI directories, Multus in one mode, and the bridge of the NAD `br`.
pub(crate) struct Rig {
    pub sim: Sim,
    pub api: KubeApi,
    pub node: Node,
    /// The node's CNI directories, where Multus is installed.
    _dirs: CniDirs,
    pub multus: Multus,
    pub bridge: HostLink,
    /// host-local's dataDir for every bridge network of the test.
    pub ipam: TempDir,
    started: Instant,
}

/// One sandbox of a pod: the pod (its VMIs as kube-manager made them), the runtime's container
/// id and the sandbox's netns.
pub(crate) struct Sandbox {
    pub pod: PodSpec,
    pub cid: String,
    pub ns: Netns,
}

impl Rig {
    /// A node with `pods`, the NADs `net-a` (Contrail), `br` (the reference bridge plugin,
    /// host-local), `net-z` (a Contrail conflist: kube-manager counts no conflist, so it makes no
    /// VMI for it and our ADD fails) and `extra`, and Multus in `mode` whose cluster network is
    /// our plugin at `version`.
    pub fn new(mode: MultusMode, pods: &[&PodSpec], extra: &[Nad], version: &str) -> Rig {
        let cluster = json!({"cniVersion": version, "name": "contrail-k8s-cni",
                             "type": "contrail-k8s-cni"});
        Rig::with_cluster(mode, pods, extra, cluster)
    }

    /// [`Rig::new`] with another cluster network config.
    pub fn with_cluster(mode: MultusMode, pods: &[&PodSpec], extra: &[Nad], cluster: Value) -> Rig {
        let started = Instant::now();
        let bridge = HostLink(format!("mbr{}", tag()));
        let ipam = TempDir::new();
        let bridged = json!({"cniVersion": "0.3.1", "type": "bridge", "bridge": bridge.0,
            "ipam": {"type": "host-local", "subnet": format!("{BRIDGE_SUBNET}.0/24"),
                     "dataDir": ipam.0}});
        let conflist = json!({"cniVersion": "0.3.1", "name": "net-z",
                              "plugins": [{"type": "contrail-k8s-cni"}]});
        let mut nads = vec![
            Nad::contrail("default", "net-a"),
            nad("br", &bridged),
            nad("net-z", &conflist),
        ];
        nads.extend_from_slice(extra);
        let sim = Sim::start_cluster(pods, &nads, &[]);
        let api = KubeApi::of(&sim);
        let mut node = Node::new(&sim);
        node.roomy();
        let dirs = CniDirs::new();
        let multus = Multus::install(mode, &dirs, &api, &node, cluster);
        if let Some(t) = multus.started_in() {
            eprintln!("multus-daemon answered on its socket {t:?} after its start");
        }
        Rig {
            sim,
            api,
            node,
            _dirs: dirs,
            multus,
            bridge,
            ipam,
            started,
        }
    }

    /// A sandbox of `pod`: its VMIs as kube-manager made them, a runtime's container id (64 hex
    /// digits), a netns.
    pub fn sandbox(&self, pod: &PodSpec) -> Sandbox {
        let mut pod = pod.clone();
        pod.vmis = self.sim.vmis_made(&pod);
        Sandbox {
            pod,
            cid: format!("{}{}", uuid(), uuid()).replace('-', ""),
            ns: Netns::new(),
        }
    }

    /// The runtime's `command` for the sandbox.
    pub fn call(&self, command: &str, sb: &Sandbox) -> Output {
        self.multus.call(command, &sb.pod, &sb.cid, &sb.ns.path())
    }

    /// An ADD that must succeed: Multus's result (the cluster network's).
    #[track_caller]
    pub fn add(&self, sb: &Sandbox) -> Value {
        let out = self.call("ADD", sb);
        assert!(out.ok, "{}\n{}", self.failed(&out), self.multus.log());
        out.json()
    }

    /// A DEL that must succeed.
    #[track_caller]
    pub fn del(&self, sb: &Sandbox) {
        let out = self.call("DEL", sb);
        assert!(out.ok, "{}\n{}", self.failed(&out), self.multus.log());
    }

    fn failed(&self, out: &Output) -> String {
        format!(
            "Multus ({:?}) failed: {} {}",
            self.multus.mode, out.stdout, out.stderr
        )
    }

    /// Our attachments of the sandbox are up: per (interface, VMI index), the VMI's MAC and
    /// address in the pod, the host end, the state file and the agent's port; the default
    /// route (when the cluster network is ours) on eth0 alone.
    #[track_caller]
    pub fn assert_attached(&self, sb: &Sandbox, ours: &[(&str, usize)]) {
        let (ns, vmis) = (&sb.ns, &sb.pod.vmis);
        for &(ifname, k) in ours {
            let v = &vmis[k];
            assert_eq!(
                (ns.mac(ifname), ns.addrs(ifname)),
                (v.mac.clone(), vec![v.addr()]),
                "{ifname}: VMI {k}"
            );
            assert!(
                host_link_exists(&host_ifname(&v.uuid)),
                "{ifname}: host end"
            );
        }
        let mut files: Vec<String> = ours.iter().map(|&(_, k)| vmis[k].uuid.clone()).collect();
        files.sort();
        assert_eq!(self.node.state_files(&sb.pod), files, "state files");
        let want: BTreeSet<_> = ours
            .iter()
            .map(|&(ifname, k)| {
                let uuid = vmis[k].uuid.clone();
                (uuid.clone(), host_ifname(&uuid), ifname.to_string())
            })
            .collect();
        assert_eq!(self.ports_of(&sb.pod), want, "the agent's ports");
        if ours.iter().any(|&(_, k)| k == 0) {
            let gw = vmis[0].gateway.clone().unwrap();
            assert_eq!(ns.default_routes(), [("-4".into(), gw, "eth0".into())]);
        }
    }

    /// The interface the bridge NAD gave the pod: an address of its subnet, a port of the bridge.
    #[track_caller]
    pub fn assert_bridged(&self, sb: &Sandbox, ifname: &str) -> String {
        let addrs = sb.ns.addrs(ifname);
        assert!(
            addrs.len() == 1 && addrs[0].starts_with(&format!("{BRIDGE_SUBNET}.")),
            "{ifname}: {addrs:?}"
        );
        assert!(!self.bridge_ports().is_empty(), "the bridge has no port");
        addrs[0].clone()
    }

    /// The network-status annotation Multus wrote for the pod, read back from the API, has an
    /// entry per interface: ours with their VMI's MAC and address, `others` with theirs; the
    /// cluster network's is the default.
    #[track_caller]
    pub fn assert_network_status(&self, sb: &Sandbox, ours: &[(&str, usize)], others: &[&str]) {
        let status = self.api.network_status(&sb.pod);
        let entry = |ifname: &str| {
            status
                .iter()
                .find(|e| e["interface"] == ifname)
                .unwrap_or_else(|| panic!("no network-status entry for {ifname}: {status:?}"))
        };
        for &(ifname, k) in ours {
            let (e, v) = (entry(ifname), &sb.pod.vmis[k]);
            let ip = v.addr().split('/').next().unwrap().to_string();
            assert_eq!((&e["mac"], &e["ips"]), (&json!(v.mac), &json!([ip])), "{e}");
            assert_eq!(e["default"] == true, ifname == "eth0", "{e}");
        }
        for ifname in others {
            let e = entry(ifname);
            assert_eq!(e["mac"], json!(sb.ns.mac(ifname)), "{e}");
        }
        assert_eq!(status.len(), ours.len() + others.len(), "{status:?}");
    }

    /// Nothing of the sandbox's pod is left: no interface in its netns (if it still has one), no
    /// state, no agent port, no host end.
    #[track_caller]
    pub fn assert_gone(&self, sb: &Sandbox) {
        if Path::new(&sb.ns.path()).exists() {
            assert_eq!(sb.ns.ifnames(), ["lo"], "interfaces left in the pod");
        }
        assert!(
            !self.node.pod_dir_exists(&sb.pod),
            "state left: {:?}",
            self.node.state_files(&sb.pod)
        );
        assert_eq!(self.ports_of(&sb.pod), BTreeSet::new(), "ports left");
        for v in &sb.pod.vmis {
            let tap = host_ifname(&v.uuid);
            assert!(!host_link_exists(&tap), "host end {tap} left");
        }
    }

    /// Nothing of any pod is left on the node: no agent port, no state, no bridge port, no
    /// host-local lease, nothing in Multus's cache. Reports the test's wall time.
    #[track_caller]
    pub fn assert_nothing_left(&self) {
        assert_eq!(self.sim.ports(), [], "ports left");
        assert_eq!(self.pods_with_state(), [] as [String; 0], "state left");
        assert_eq!(self.bridge_ports(), [] as [String; 0], "bridge ports left");
        let leases: Vec<String> = files_in(&self.ipam.0)
            .into_iter()
            .filter(|f| f.contains(&format!("{BRIDGE_SUBNET}.")))
            .collect();
        assert_eq!(leases, [] as [String; 0], "host-local leases left");
        let cached = files_in(&self.multus.cache_dir());
        assert_eq!(cached, [] as [String; 0], "Multus's cache");
        eprintln!(
            "{:?}: {:?} from the rig's start",
            self.multus.mode,
            self.started.elapsed()
        );
    }

    /// The pods the plugin's state directory has a directory of.
    pub fn pods_with_state(&self) -> Vec<String> {
        std::fs::read_dir(self.node.ports_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.starts_with('.'))
            .collect()
    }

    /// The agent's ports of `pod`: (VMI, host end, interface).
    pub fn ports_of(&self, pod: &PodSpec) -> BTreeSet<(String, String, String)> {
        let vmis: BTreeSet<&str> = pod.vmis.iter().map(|v| v.uuid.as_str()).collect();
        self.sim
            .ports()
            .into_iter()
            .filter(|p| vmis.contains(p.0.as_str()))
            .collect()
    }

    /// The host links enslaved to the NAD `br`'s bridge (the host ends of its pods' veths).
    pub fn bridge_ports(&self) -> Vec<String> {
        if !host_link_exists(&self.bridge.0) {
            return Vec::new();
        }
        let links: Vec<Value> =
            serde_json::from_str(&sh("ip", &["-j", "link", "show", "master", &self.bridge.0]))
                .unwrap();
        links
            .iter()
            .map(|l| l["ifname"].as_str().unwrap().to_string())
            .collect()
    }

    /// The calls our plugin logged for the sandbox, in order: "COMMAND ifname network".
    pub fn our_calls(&self, sb: &Sandbox) -> Vec<String> {
        let container = format!(" container={} ", sb.cid);
        self.node
            .log()
            .lines()
            .filter(|l| l.contains(&container))
            .map(|l| {
                let field = |k: &str| {
                    l.split(' ')
                        .find_map(|w| w.strip_prefix(k))
                        .unwrap_or("?")
                        .to_string()
                };
                let command = l.split(&container).next().unwrap().rsplit(' ').next();
                format!(
                    "{} {} {}",
                    command.unwrap(),
                    field("ifname="),
                    field("network=")
                )
            })
            .collect()
    }
}

/// A NAD whose config is `config`.
fn nad(name: &str, config: &Value) -> Nad {
    Nad {
        namespace: "default".into(),
        name: name.into(),
        config: Some(config.to_string()),
    }
}

/// The files under `dir`, at any depth (directories aside).
pub(crate) fn files_in(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_in(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}
