//! CRI-O in the layouts a node has: the settings of `examples/crio/` as they are, and beside
//! the real Multus 4.3 thick, whose `00-multus.conf` is then CRI-O's pod network while the
//! Contrail config is a network of its own, which CRI-O's start GCs with `null`.

use contrail_testkit::cluster::Nad;
use contrail_testkit::*;
use serde_json::json;

use super::runtime::{Crio, PodNetns};
use super::*;

/// `examples/crio/crio.conf.d/` as a node has it: CRI-O reads the example's network settings
/// (the node's `/etc/cni/net.d` and `/opt/cni/bin`), where the node-wide file and the shipped
/// conflist, installed as the example says (`05-contrail.conflist`), sit: a pod gets the
/// conflist's two plugins at 1.1.0, and its end leaves nothing.
#[test]
fn the_crio_example_is_a_nodes_network_config() {
    let vmi = VmiSpec::new("default", 7).dual_stack();
    let fx = Fixture::new(vec![vmi.clone()]);
    let mut crio = Crio::new(&fx.node);
    crio.as_example();
    crio.install("05-contrail.conflist", &runtime::shipped_conflist());
    crio.start();
    let (ready, reason, message) = crio.network_ready();
    assert!(ready, "NetworkReady: {reason}: {message}");
    let id = crio.run_pod(&fx.pod);
    let pod = assert_attached(&crio, &fx.sim, &fx.node, &fx.pod, &vmi, &id);
    crio.stop_pod(&id);
    crio.remove_pod(&id);
    assert!(!std::path::Path::new(&pod.netns).exists());
    assert_nothing_left(&crio, &fx.sim, &fx.node);
}

/// A node of a Multus cluster on CRI-O: Multus thick's `00-multus.conf` is the pod network; the
/// daemon runs the plugin for the cluster network and each of the pod's networks. At CRI-O's
/// restart, Multus's network gets GC with the live sandbox and the Contrail config, which no pod
/// uses directly, `null`: the live pod stays whole (every interface, registration and state
/// file), and the Contrail config's GC passed. Its end leaves nothing.
#[test]
fn beside_multus_thick_a_restart_keeps_every_live_pod_whole() {
    let pod = PodSpec::annotated("default", "net-a,net-a");
    let sim = Sim::start_cluster(&[&pod], &[Nad::contrail("default", "net-a")], &[]);
    let api = KubeApi::of(&sim);
    let mut node = Node::new(&sim);
    node.roomy();
    let bin = TempDir::new();
    let dirs = CniDirs::at(&node.conf_dir.0, &bin.0);
    let cluster = json!({"cniVersion": "1.1.0", "name": PLUGIN, "type": "contrail-k8s-cni"});
    // Multus first: its daemon's service account goes into a /run of the node's own.
    let multus = Multus::install(MultusMode::Thick, &dirs, &api, &node, cluster);
    let mut crio = Crio::new(&node);
    crio.add_plugin("multus-shim", &peer_bin("multus-shim"));
    crio.start();
    let (ready, reason, message) = crio.network_ready();
    assert!(ready, "NetworkReady: {reason}: {message}");
    let id = crio.run_pod(&pod);
    let vmis = sim.vmis_made(&pod);
    let whole = |crio: &Crio| {
        let ns = PodNetns::of(&crio.netns(&id));
        assert_eq!(
            ns.ifnames(),
            ["eth0", "lo", "net1", "net2"],
            "{}",
            multus.log()
        );
        for (ifname, vmi) in ["eth0", "net1", "net2"].iter().zip(&vmis) {
            assert_eq!(ns.mac(ifname), vmi.mac, "{ifname}");
            assert_eq!(ns.addrs(ifname), [vmi.addr()], "{ifname}");
        }
        assert_eq!(sim.ports().len(), 3);
        assert_eq!(node.state_files(&pod).len(), 3);
    };
    whole(&crio);

    let before = crio.calls().len();
    crio.stop();
    crio.start();
    let gcs: Vec<_> = crio.calls()[before..]
        .iter()
        .filter(|c| c.command == "GC")
        .cloned()
        .collect();
    let ours = gcs
        .iter()
        .find(|c| c.plugin == PLUGIN && c.stdin["name"] == PLUGIN)
        .unwrap_or_else(|| panic!("no GC of the Contrail config: {gcs:?}"));
    assert!(
        ours.stdin["cni.dev/valid-attachments"].is_null(),
        "{ours:?}"
    );
    assert_eq!(ours.rc, 0, "{ours:?}");
    // Multus's GC, with its own list (its cache: the pod's every attachment), passes now that
    // the node had a pod (at CRI-O's first start it failed, as Multus 4.3's GC does before a
    // node's first pod: it reads a cache directory its first ADD makes).
    let theirs = gcs
        .iter()
        .find(|c| c.plugin == "multus-shim")
        .unwrap_or_else(|| panic!("no GC of Multus's network: {gcs:?}"));
    assert_eq!(theirs.rc, 0, "{theirs:?}");
    whole(&crio);
    let log = crio.log();
    let ours = format!("Error while GCing network {PLUGIN}");
    assert!(!log.contains(&ours), "{ours:?} in CRI-O's log:\n{log}");

    crio.stop_pod(&id);
    crio.remove_pod(&id);
    assert_eq!(sim.ports(), []);
    assert!(!node.pod_dir_exists(&pod), "{:?}", node.leftovers());
    for v in &vmis {
        assert!(!host_link_exists(&host_ifname(&v.uuid)));
    }
    assert_eq!(crio.pods(), [], "sandboxes left");
    assert_eq!(node.leftovers(), [] as [String; 0]);
}
