//! Under the real CNI-Genie (`testkit::Genie`): a pod's networks by NAD (the NPWG annotation)
//! and by config file (`cni:`, the shipped `examples/genie/pod.yaml`), mixed with a bridge; Genie's teardown, which DELs every delegate
//! with the runtime's eth0, releasing every Contrail attachment of the pod on a node set to
//! `"meta-plugin": "genie"`; Genie's "rollback" of a failed ADD (the earlier delegates ADDed
//! again) then the runtime's DEL; a DEL after the pod object is gone, which Genie answers
//! without calling any delegate, leaving the attachments to the sweep.

use std::time::Duration;

use contrail_testkit::cluster::Nad;
use contrail_testkit::*;
use serde_json::json;

/// A node running Genie, one pod of the cluster on it, and the pod's sandbox.
struct Node0 {
    pod: PodSpec,
    sim: Sim,
    api: KubeApi,
    node: Node,
    genie: Genie,
    ns: Netns,
    cid: String,
}

impl Node0 {
    fn new(pod: PodSpec, nads: &[Nad]) -> Node0 {
        let sim = Sim::start_cluster(&[&pod], nads, &[]);
        let api = KubeApi::of(&sim);
        let mut node = Node::new(&sim);
        node.roomy();
        let genie = Genie::install(&mut node, &api);
        Node0 {
            pod,
            sim,
            api,
            node,
            genie,
            ns: Netns::new(),
            cid: uuid(),
        }
    }

    fn genie(&self, command: &str) -> Output {
        self.genie
            .call(command, &self.pod, &self.cid, &self.ns.path())
    }

    /// The pod's VMI at `index` is on `ifname` in the pod: the VMI's MAC and the agent's address.
    #[track_caller]
    fn attached(&self, ifname: &str, index: usize) -> VmiSpec {
        let vmi = self.sim.vmis_made(&self.pod)[index].clone();
        assert_eq!(self.ns.mac(ifname), vmi.mac, "{ifname}");
        assert_eq!(self.ns.addrs(ifname), [vmi.addr()], "{ifname}");
        vmi
    }

    /// Nothing of the plugin's is left of the pod: no state, no registration, no host link.
    #[track_caller]
    fn released(&self) {
        assert!(
            !self.node.pod_dir_exists(&self.pod),
            "state left: {:?}",
            self.node.state_files(&self.pod)
        );
        assert_eq!(self.sim.ports(), []);
        for v in self.sim.vmis_made(&self.pod) {
            let tap = host_ifname(&v.uuid);
            wait_for(&format!("{tap} to go"), Duration::from_secs(10), || {
                !host_link_exists(&tap)
            });
        }
        assert_eq!(self.node.leftovers(), [] as [String; 0]);
    }
}

/// A bridge NAD (the reference plugins 1.9.1), the non-Contrail network of the pods here.
fn bridge_nad() -> Nad {
    Nad {
        namespace: "default".into(),
        name: "br-net".into(),
        config: Some(
            json!({"cniVersion": "0.3.1", "type": "bridge", "bridge": "geniebr0",
                   "ipam": {"type": "host-local", "subnet": "10.99.0.0/24"}})
            .to_string(),
        ),
    }
}

/// The NAD a Contrail network needs: its type alone (Genie gives it the NAD's name and 0.3.0).
fn contrail_nad(name: &str) -> Nad {
    Nad {
        namespace: "default".into(),
        name: name.into(),
        config: Some(json!({"type": "contrail-k8s-cni"}).to_string()),
    }
}

#[test]
fn a_pods_networks_by_nad_with_a_bridge_and_genies_teardown_releases_every_contrail_attachment() {
    let pod = PodSpec::annotated("default", "net-a,net-a,br-net");
    let n = Node0::new(pod, &[contrail_nad("net-a"), bridge_nad()]);
    let out = n.genie("ADD");
    out.assert_ok();
    // The cluster network (the node-wide file, the first config after Genie's) on eth0, then
    // each entry in order: net-a twice, then the bridge.
    assert_eq!(n.ns.ifnames(), ["eth0", "eth1", "eth2", "eth3", "lo"]);
    let vmis = [
        n.attached("eth0", 0),
        n.attached("eth1", 1),
        n.attached("eth2", 2),
    ];
    assert_eq!(
        vmis.iter().map(|v| v.network.as_str()).collect::<Vec<_>>(),
        ["default", "net-a", "net-a"]
    );
    assert!(
        n.ns.addrs("eth3")[0].starts_with("10.99.0."),
        "{:?}",
        n.ns.addrs("eth3")
    );
    // The pod's default route is the cluster network's.
    let default = n.ns.default_routes();
    assert_eq!(
        default.iter().map(|r| r.2.as_str()).collect::<Vec<_>>(),
        ["eth0"],
        "{default:?}"
    );
    // Genie's result (its cniVersion, 0.4.0) and the status it PATCHes into the pod name our
    // interfaces with the VMIs' MACs.
    let result = out.json();
    assert_eq!(result["cniVersion"], "0.4.0");
    let status = n.api.network_status(&n.pod);
    for (i, v) in vmis.iter().enumerate() {
        let entry = status
            .iter()
            .find(|e| e["interface"] == format!("eth{i}"))
            .unwrap_or_else(|| panic!("eth{i} not in {status:?}"));
        assert_eq!(entry["mac"], v.mac);
    }
    assert_eq!(n.sim.ports().len(), 3);
    // Genie's teardown: bridge, net-a, net-a, the cluster network, each DEL with eth0. Every
    // Contrail attachment goes, the second net-a DEL finds nothing.
    n.genie("DEL").assert_ok();
    n.released();
    let dels = n.node.log().matches("DEL container=").count();
    assert_eq!(dels, 3, "one DEL per Contrail entry:\n{}", n.node.log());
    // The runtime's second teardown (a second StopPodSandbox): nothing left to do.
    n.genie("DEL").assert_ok();
    n.released();
}

#[test]
fn the_genie_example_pod_puts_contrail_beside_calico() {
    // examples/genie/pod.yaml: `cni:` names config files, `10-contrail.conf` is `contrail`,
    // `15-calico.conf` `calico` (the reference ptp plugin standing in for calico). Calico keeps
    // eth0 and the default route; Contrail's cluster-network VMI is eth1, with no default route.
    let text = std::fs::read_to_string(repo_file("examples/genie/pod.yaml")).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let cni = doc["metadata"]["annotations"]["cni"].as_str().unwrap();
    assert_eq!(cni, "calico,contrail");
    let mut pod = PodSpec::annotated("default", "").annotate("cni", cni);
    pod.name = format!("{}-{}", doc["metadata"]["name"].as_str().unwrap(), tag());
    let n = Node0::new(pod, &[]);
    n.genie.add_conf(
        "15-calico.conf",
        &json!({"cniVersion": "0.3.1", "name": "k8s-pod-network", "type": "ptp",
                "ipam": {"type": "host-local", "subnet": "10.97.0.0/24",
                         "routes": [{"dst": "0.0.0.0/0"}]}}),
    );
    n.genie("ADD").assert_ok();
    assert_eq!(n.ns.ifnames(), ["eth0", "eth1", "lo"]);
    n.attached("eth1", 0);
    let default = n.ns.default_routes();
    assert_eq!(
        default.iter().map(|r| r.2.as_str()).collect::<Vec<_>>(),
        ["eth0"],
        "{default:?}"
    );
    n.genie("DEL").assert_ok();
    n.released();
}

#[test]
fn after_genies_rollback_of_a_failed_add_the_runtimes_del_leaves_nothing() {
    // net-z's NAD is a conflist: kube-manager made no VMI for it, so the plugin's ADD of it
    // fails (code 101). Genie stops there (the last net-a is never called), ADDs the earlier
    // delegates again (its "rollback"), and answers code 100 with the plugin's message inside.
    let pod = PodSpec::annotated("default", "net-a,br-net,net-z,net-a");
    let net_z = Nad {
        namespace: "default".into(),
        name: "net-z".into(),
        config: Some(
            json!({"cniVersion": "0.3.1", "name": "net-z",
                   "plugins": [{"type": "contrail-k8s-cni"}]})
            .to_string(),
        ),
    };
    let n = Node0::new(pod, &[contrail_nad("net-a"), bridge_nad(), net_z]);
    let out = n.genie("ADD");
    assert_eq!(out.code(), 100);
    assert!(
        out.msg().contains("has no VMI on network \"net-z\""),
        "{}",
        out.msg()
    );
    // What the earlier delegates made stays until the runtime's DEL: the cluster network and
    // the first net-a, ADDed again by the "rollback".
    n.attached("eth0", 0);
    n.attached("eth1", 1);
    assert_eq!(n.node.state_files(&n.pod).len(), 2);
    assert!(!n.ns.ifnames().contains(&"eth3".to_string()));
    // The runtime DELs the sandbox it could not start: through Genie, every entry with eth0.
    n.genie("DEL").assert_ok();
    n.released();
}

#[test]
fn a_del_after_the_pod_object_is_gone_leaves_the_attachments_to_the_sweep() {
    let pod = PodSpec::annotated("default", "net-a");
    let n = Node0::new(pod, &[contrail_nad("net-a")]);
    n.genie("ADD").assert_ok();
    n.attached("eth1", 1);
    // The pod object goes first (a force delete); the runtime's DEL then reaches Genie, which
    // cannot read the pod's networks and answers success without calling any delegate.
    n.api.delete_pod(&n.pod);
    n.genie("DEL").assert_ok();
    assert!(!n.node.log().contains("DEL container="), "{}", n.node.log());
    assert_eq!(n.node.state_files(&n.pod).len(), 2);
    // Genie forwards no GC: the sweep of `install --watch` releases the attachments once the
    // sandbox is provably gone (its netns removed with it).
    let Node0 { ns, .. } = &n;
    let path = ns.path();
    sh("ip", &["netns", "del", &ns.name]);
    assert!(!std::path::Path::new(&path).exists());
    let dir = TempDir::new();
    let watch = Watch::start(
        &dir.0.join("bin"),
        &dir.0.join("net.d"),
        &n.node.node_file(),
        &["--sweep-interval", "1", "--sweep-grace", "0"],
    );
    wait_for("the sweep", Duration::from_secs(60), || {
        watch.log().contains("sweep released 2 attachment(s)")
    });
    watch.terminate();
    n.released();
}
