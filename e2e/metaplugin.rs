//! What meta-plugins send beyond a network config: requested IPs and MACs, logged and ignored.
//! (The real Multus, its rollback included: `e2e/multus/`; the real CNI-Genie: `e2e/genie.rs`.)

use contrail_testkit::*;
use serde_json::json;

#[test]
fn requested_ips_and_macs_are_logged_and_ignored() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let (pod, ns) = (&fx.pod, &fx.ns);
    let mut conf = fx.node.netconf("0.4.0", "net-a");
    // Multus puts capability args in runtimeConfig, a selection's cni-args under args.cni, and
    // may append IP= / MAC= to CNI_ARGS.
    conf["runtimeConfig"] = json!({"ips": ["192.0.2.9/24"], "mac": "02:11:22:33:44:55"});
    conf["args"] =
        json!({"cni": {"ips": ["192.0.2.10/24"], "mac": "02:11:22:33:44:56", "other": 1}});
    let args = format!("{};IP=192.0.2.11/24;MAC=02:11:22:33:44:57", fx.args());
    let r = fx
        .node
        .cni("ADD")
        .container(&fx.cid)
        .netns(&ns.path())
        .ifname("net1")
        .args(&args)
        .run(&conf)
        .assert_ok()
        .json();
    // Contrail's allocation wins, in the interface and in the result.
    assert_eq!(
        (ns.mac("net1"), ns.addrs("net1")),
        (pod.vmis[1].mac.clone(), vec![pod.vmis[1].addr()])
    );
    assert_eq!(r["interfaces"][1]["mac"], pod.vmis[1].mac);
    assert_eq!(r["ips"][0]["address"], pod.vmis[1].addr());
    let log = std::fs::read_to_string(fx.node.config_dir.0.join("cni.log")).unwrap();
    for what in [
        "runtimeConfig.ips",
        "runtimeConfig.mac",
        "args.cni.ips",
        "args.cni.mac",
        "CNI_ARGS IP=",
        "CNI_ARGS MAC=",
    ] {
        assert!(
            log.contains(&format!("ignoring {what}")),
            "no warning for {what}:\n{log}"
        );
    }
    fx.node
        .cni("DEL")
        .container(&fx.cid)
        .netns(&ns.path())
        .ifname("net1")
        .args(&args)
        .run(&conf)
        .assert_ok();
}
