//! CRI-O's GC at its start, in the layouts CRI-O 1.36 produces: each network config it loads
//! gets one GC (once STATUS of the default network first passed), listing in
//! `cni.dev/valid-attachments` every sandbox it knows whose network is that config, or `null`
//! when there is none (libcni 1.3 encodes the nil list ocicni builds as `null`). A list that is
//! present but empty (`[]`) cannot come from CRI-O 1.36: ocicni appends each sandbox to a nil
//! slice per network and libcni injects that slice as it is, so it is `null` or not empty.
//! The full list (a restart with live pods) is `restart.rs`'s.

use contrail_testkit::*;
use serde_json::{Value, json};

use super::runtime::{Crio, shipped_conflist};
use super::{
    IFNAME, PLUGIN, assert_no_gc_failed, assert_nothing_left, assert_released,
    crashed_runtimes_leftover, gc_at_start, node_links,
};

/// The bridge the other network's pods are plugged into.
const BRIDGE: &str = "ck8sbr0";

/// CRI-O's first start on a node (no sandboxes): its GC lists none (`null`), which the plugin
/// takes as "none listed" (CRI-O logs no failed GC) and releases what is provably gone: the
/// attachment of a sandbox a crashed runtime left, whose netns path is gone (its state file, the
/// agent's port and its host end).
#[test]
fn a_fresh_start_releases_what_a_crashed_runtime_left() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 3)]);
    let holder = crashed_runtimes_leftover(&fx.node, &fx.pod);
    let crio = Crio::with_shipped_conflist(&fx.node);
    let gc = gc_at_start(&crio, 0);
    assert_eq!(gc.rc, 0, "{gc:?}");
    for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
        assert!(gc.stdin[key].is_null(), "{key}: {gc:?}");
    }
    assert_released(&fx.sim, &fx.node, &fx.pod, &fx.pod.vmis[0]);
    assert!(
        fx.node.log().contains("GC released 1 attachment(s)"),
        "{}",
        fx.node.log()
    );
    drop(holder);
    assert_nothing_left(&crio, &fx.sim, &fx.node);
}

/// `00-bridge.conflist` (the reference bridge and host-local 1.9.1, at 1.1.0), the default
/// network as the first config by name, with a pool and a state directory of the test's.
fn bridge_conflist(crio: &Crio) -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": "podnet",
        "plugins": [{
            "type": "bridge", "bridge": BRIDGE, "isGateway": true, "ipMasq": false,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.0.0/24"}]],
                     "dataDir": crio.path("host-local")},
        }],
    })
}

/// The Contrail conflist beside another default network (a bridge conflist sorting first, as
/// Multus's conf does on a Multus node), whose pods use it: at every start CRI-O sends the
/// bridge its pods and the Contrail config `null`, STATUS and the restore CHECKs to the bridge
/// only. The plugin takes the `null` (no failed GC in CRI-O's log) and keeps its live attachment
/// that CRI-O does not know of (one a meta-plugin made): its eth0, state file, port and host
/// end stay whole.
#[test]
fn beside_another_default_network_the_contrail_config_gets_null() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 4)]);
    let vmi = fx.pod.vmis[0].clone();
    fx.add(IFNAME, PLUGIN);
    let mut crio = Crio::new(&fx.node);
    crio.add_plugin("bridge", &peer_bin("cni-bridge"));
    crio.add_plugin("host-local", &peer_bin("cni-host-local"));
    crio.install("00-bridge.conflist", &bridge_conflist(&crio));
    crio.install("05-contrail.conflist", &shipped_conflist());
    crio.start();
    let first = gc_at_start(&crio, 0);
    assert!(
        first.stdin["cni.dev/valid-attachments"].is_null(),
        "{first:?}"
    );

    let other = PodSpec::new(Vec::new());
    let id = crio.run_pod(&other);
    let status = crio.inspect(&id)["status"].clone();
    let ip = status["network"]["ip"].as_str().unwrap_or_default();
    assert!(ip.starts_with("10.99.0."), "the bridge's address: {status}");
    let from = crio.calls().len();
    crio.stop();
    crio.start();
    let gc = gc_at_start(&crio, from);
    let bridge_gc = crio.calls()[from..]
        .iter()
        .find(|c| c.plugin == "bridge" && c.command == "GC")
        .cloned()
        .expect("the bridge's GC");
    assert_eq!(
        bridge_gc.stdin["cni.dev/valid-attachments"],
        json!([{"containerID": id, "ifname": IFNAME}]),
        "{bridge_gc:?}"
    );
    assert_eq!(gc.rc, 0, "{gc:?}");
    assert!(gc.stdin["cni.dev/valid-attachments"].is_null(), "{gc:?}");
    // The restore CHECK of the bridge's pod (before the CRI answered) went to the bridge.
    let bridge_checks = crio.calls()[from..]
        .iter()
        .filter(|c| c.plugin == "bridge" && c.command == "CHECK" && c.container == id)
        .count();
    assert_eq!(bridge_checks, 1);
    let gc_only = ("GC".to_string(), String::new());
    assert_eq!(crio.plugin_calls(0), [gc_only.clone(), gc_only]);

    assert_eq!(fx.ns.mac(IFNAME), vmi.mac);
    assert_eq!(fx.node.state_files(&fx.pod), [vmi.uuid.as_str()]);
    assert!(host_link_exists(&host_ifname(&vmi.uuid)));
    assert_eq!(fx.sim.ports().len(), 1);
    assert_no_gc_failed(&crio);

    crio.stop_pod(&id);
    crio.remove_pod(&id);
    fx.del(IFNAME, PLUGIN).assert_ok();
    assert_released(&fx.sim, &fx.node, &fx.pod, &vmi);
    // The bridge stays when its last pod goes, as on a node.
    assert!(node_links().contains(&BRIDGE.to_string()));
    sh("ip", &["link", "del", BRIDGE]);
    assert_nothing_left(&crio, &fx.sim, &fx.node);
}
