//! A pod that mixes plugins, in Multus order: eth0 from Debian's bridge + host-local (the
//! cluster network, as calico would be), net1 contrail net-a, net2 macvlan on a veth master,
//! net3 contrail net-a again.

use contrail_testkit::*;
use serde_json::json;

#[test]
fn mixed_plugin_pod_add_partial_del_and_reverse_del() {
    // kube-manager made VMIs only for the pod's Contrail networks: the cluster network
    // (unused here: the bridge serves eth0) and net-a twice; macvlan-net has none.
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
    ];
    let fx = Fixture::new(vmis.clone());
    let ns = &fx.ns;
    let t = tag();
    let subnet = u8::from_str_radix(&t[..2], 16).unwrap() % 200 + 20;
    let bridge = HostLink(format!("ck8sb{t}"));
    let master = HostLink::macvlan_master();
    let ipam_dir = TempDir::new();

    let cluster = json!({"cniVersion": "0.4.0", "name": "cluster", "type": "bridge", "bridge": bridge.0,
        "isGateway": true, "isDefaultGateway": true,
        "ipam": {"type": "host-local", "subnet": format!("10.244.{subnet}.0/24"), "dataDir": ipam_dir.0}});
    let macvlan = json!({"cniVersion": "0.4.0", "name": "macvlan-net", "type": "macvlan", "master": master.0,
        "mode": "bridge", "ipam": {"type": "static", "addresses": [{"address": "192.168.77.5/24"}]}});
    let delegates = [
        Delegate::debian(cluster, "eth0"),
        Delegate::contrail(&fx.node, "0.3.0", "net-a", "net1"),
        Delegate::debian(macvlan, "net2"),
        Delegate::contrail(&fx.node, "0.3.0", "net-a", "net3"),
    ];
    let multus = fx.multus();

    let results = multus
        .add_all(&delegates)
        .unwrap_or_else(|(i, out)| panic!("delegate {i} failed: {out:?}"));
    assert_eq!(ns.ifnames(), ["eth0", "lo", "net1", "net2", "net3"]);
    let gw = format!("10.244.{subnet}.1");
    assert_eq!(ns.addrs("eth0"), [format!("10.244.{subnet}.2/24")]);
    assert_eq!(
        ns.mac("eth0"),
        results[0]["interfaces"][2]["mac"].as_str().unwrap()
    );
    // net1 and net3 get net-a's first and second VMI, whatever their uuid order.
    assert_eq!(
        (ns.mac("net1"), ns.addrs("net1")),
        (vmis[1].mac.clone(), vec![vmis[1].addr()])
    );
    assert_eq!(ns.addrs("net2"), ["192.168.77.5/24"]);
    assert_eq!(
        (ns.mac("net3"), ns.addrs("net3")),
        (vmis[2].mac.clone(), vec![vmis[2].addr()])
    );
    // The cluster network keeps the only default route.
    assert_eq!(
        ns.default_routes(),
        [("-4".to_string(), gw.clone(), "eth0".to_string())]
    );
    for d in [&delegates[1], &delegates[3]] {
        multus.call("CHECK", d).assert_ok();
    }

    // DEL of net1 alone: eth0, net2 and net3 keep working.
    multus.call("DEL", &delegates[1]).assert_ok();
    assert_eq!(ns.ifnames(), ["eth0", "lo", "net2", "net3"]);
    assert_eq!(ns.addrs("eth0"), [format!("10.244.{subnet}.2/24")]);
    assert_eq!(ns.addrs("net2"), ["192.168.77.5/24"]);
    assert_eq!(ns.addrs("net3"), [vmis[2].addr()]);
    assert_eq!(
        ns.default_routes(),
        [("-4".to_string(), gw, "eth0".to_string())]
    );
    multus.call("CHECK", &delegates[3]).assert_ok();
    assert_eq!(fx.node.state_files(&fx.pod), [vmis[2].uuid.clone()]);

    // The pod goes away: Multus DELs every delegate in reverse order (net1 a second time).
    multus.del_all(&delegates);
    fx.assert_nothing_left();
    // host-local released eth0's address.
    let reserved: Vec<_> = walk(&ipam_dir.0)
        .into_iter()
        .filter(|p| p.contains("10.244."))
        .collect();
    assert!(reserved.is_empty(), "host-local still holds {reserved:?}");
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}
