//! GC and STATUS through Multus (a 1.1.0 config): Multus forwards both to the cluster network's
//! delegate only. GC's list is not the runtime's: Multus lists every attachment its cache holds
//! (libcni's cached results of every delegate: eth0, net1 and the bridge's net2 alike), so our
//! plugin must keep every attachment of a listed sandbox, and releases a sandbox that is
//! neither listed nor alive.

use contrail_testkit::*;
use serde_json::{Value, json};

use super::Rig;

pub fn gc_and_status_reach_the_cluster_network(mode: MultusMode) {
    let live = PodSpec::annotated("default", "net-a,br");
    let lost = PodSpec::annotated("default", "net-a");
    let mut rig = Rig::new(mode, &[&live, &lost], &[], "1.1.0");
    // The runtime's list, as CRI-O sends it to the config its pods use: their eth0.
    let gc = |rig: &Rig, valid: Value| {
        let mut conf = rig.multus.conf().clone();
        conf["cni.dev/valid-attachments"] = valid;
        rig.multus.call_node("GC", &conf)
    };
    let status = |rig: &Rig| rig.multus.call_node("STATUS", rig.multus.conf());
    // A runtime's GC before the node's first pod: Multus lists its cache's results, which
    // libcni makes at the first ADD; without them, GC fails and reaches no delegate.
    let fresh = gc(&rig, json!([]));
    assert_eq!(fresh.code(), 999, "{fresh:?}");
    assert!(
        fresh.msg().contains("error in gather valid attachments"),
        "{}",
        fresh.msg()
    );
    assert_eq!(gc_results(&rig), [] as [String; 0], "GC reached us");
    let (a, b) = (rig.sandbox(&live), rig.sandbox(&lost));
    rig.add(&a);
    rig.add(&b);
    status(&rig).assert_ok();
    assert_eq!(statuses(&rig), ["ok"], "STATUS reached us");

    // b's sandbox goes without a DEL (its netns removed, as after a runtime crashed). Multus's
    // GC lists what its cache holds, b's attachments too: b stays.
    sh("ip", &["netns", "del", &b.ns.name]);
    let listed = json!([{"containerID": a.cid, "ifname": "eth0"}]);
    gc(&rig, listed.clone()).assert_ok();
    assert_eq!(gc_results(&rig), ["GC released 0 attachment(s)"]);
    let a_ifs = [("eth0", 0), ("net1", 1)];
    rig.assert_attached(&a, &a_ifs);
    assert_eq!(rig.node.state_files(&b.pod).len(), 2, "b's attachments");
    // Multus's cache of b is lost: the next GC releases b, and keeps every attachment of a.
    rig.multus.lose_cache_of(&b.cid);
    gc(&rig, listed).assert_ok();
    assert_eq!(gc_results(&rig)[1], "GC released 2 attachment(s)");
    rig.assert_gone(&b);
    rig.assert_attached(&a, &a_ifs);
    rig.assert_bridged(&a, "net2");

    // STATUS with the agent down: our error reaches the runtime; with the agent back, passes.
    rig.sim.stop();
    // Thin passes our error on as it is; the shim wraps the daemon's answer in code 999.
    let down = status(&rig);
    let code = match mode {
        MultusMode::Thin => 50,
        MultusMode::Thick => 999,
    };
    assert_eq!(down.code(), code, "{down:?}");
    assert!(down.msg().contains("is unreachable"), "{}", down.msg());
    assert_eq!(statuses(&rig), ["ok", "failed"]);
    rig.sim.restart(&[]);
    let port = rig.sim.port;
    rig.node.set("vrouter-port", json!(port));
    status(&rig).assert_ok();

    rig.del(&a);
    rig.assert_gone(&a);
    rig.assert_nothing_left();
}

/// What each GC that reached our plugin released, as its log says.
fn gc_results(rig: &Rig) -> Vec<String> {
    let log = rig.node.log();
    log.lines()
        .filter_map(|l| l.find("GC released ").map(|at| l[at..].to_string()))
        .collect()
}

/// How each STATUS that reached our plugin ended, as its log says: "ok" or "failed".
fn statuses(rig: &Rig) -> Vec<String> {
    let log = rig.node.log();
    log.lines()
        .filter_map(|l| l.split(" STATUS container= ").nth(1))
        .map(|rest| {
            rest.split(": ")
                .nth(1)
                .unwrap_or("")
                .split(' ')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}
