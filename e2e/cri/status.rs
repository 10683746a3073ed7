//! The node's network readiness as kubelet reads it: the CRI `Status`'s `NetworkReady`, which
//! kubelet asks for every few seconds and shows as the node's `Ready` condition. containerd
//! 2.2.7 runs the plugin's STATUS for it; 1.6 never does.

use std::time::{Duration, Instant};

use contrail_testkit::*;
use serde_json::json;

use crate::containerd::Containerd;
use crate::version::Version;
use crate::*;

on_both!(network_ready_follows_the_plugins_status);

/// Upper bound for one CRI Status while the agent hangs: containerd runs the STATUS without a
/// deadline of its own, and the plugin's (its request timeout: 0.5 s on the test node) ends it.
const STATUS_BOUND: Duration = Duration::from_secs(10);

/// kubelet's view of the network follows the agent on containerd 2.2.7: ready while the agent
/// answers; not ready with the plugin's message (code 50 in its log) while it is down and while
/// it hangs (the plugin's deadline ends the STATUS, and with it the CRI Status); ready again
/// once it is back. 2.2.7 asks the plugin's STATUS once per CRI Status and at no other time
/// (not at its start, not meanwhile); 1.6 never asks, and its network is ready throughout.
/// Neither gates RunPodSandbox on it: with the agent down, the ADD still goes to the plugin,
/// which fails, and containerd's rollback leaves nothing; with the agent back, a pod runs.
fn network_ready_follows_the_plugins_status(v: Version) {
    let mut fx = Fixture::new(vec![VmiSpec::new("default", 7).dual_stack()]);
    let cd = Containerd::start(v, &fx.node, Some(&conflist()), &[]);
    assert_eq!(
        cd.calls(),
        [] as [[String; 5]; 0],
        "calls as containerd came up"
    );
    for _ in 0..3 {
        assert_network(&cd, &fx, None);
    }

    fx.stop_agent();
    assert_network(&cd, &fx, Some("connecting: Connection refused"));
    // The ADD's wait for the agent is not this test's subject: one try.
    let retries = fx.node.contrail()["poll-retries"].clone();
    fx.set("poll-retries", json!(1));
    let err = cd
        .try_run_pod(&fx.pod, "")
        .expect_err("RunPodSandbox with the agent down");
    let failed = "plugin type=\"contrail-k8s-cni\" failed (add): ";
    assert!(
        err.message().contains(failed) && err.message().contains("Connection refused"),
        "{err:?}"
    );
    // The ADD went to the plugin; containerd's rollback DEL (nothing to release) succeeded,
    // and containerd forgot the sandbox.
    let calls: Vec<(String, String)> = cd
        .calls()
        .into_iter()
        .filter(|c| c[0] != "STATUS")
        .map(|c| (c[0].clone(), c[2].clone()))
        .collect();
    let netns = &calls[0].1;
    assert_eq!(
        calls,
        [("ADD".into(), netns.clone()), ("DEL".into(), netns.clone())]
    );
    assert_eq!(cd.pods(), [], "sandboxes left");
    assert_eq!(netns_names(), [] as [String; 0]);
    assert_eq!(fx.node.leftovers(), [] as [String; 0]);
    assert_network(&cd, &fx, Some("connecting: Connection refused"));

    fx.set("poll-retries", retries);

    fx.restart_agent(&["--hang", "GET:/"]);
    assert_network(&cd, &fx, Some("timed out after"));

    fx.restart_agent(&[]);
    assert_network(&cd, &fx, None);
    let id = cd.run_pod(&fx.pod);
    let (netns, host) = assert_attached(&cd, &fx.sim, &fx.node, &fx.pod, &fx.pod.vmis[0], &id);
    end_pod(&cd, &fx, &id, &netns, &host);
    assert_network(&cd, &fx, None);
}

/// One CRI Status, as kubelet sends it, answers within [`STATUS_BOUND`] with `NetworkReady`
/// as the agent is: up (`unreachable` none), or not reachable `why` (a part of the plugin's
/// message). Every CRI Status so far ran the plugin's STATUS once (2.2.7: node-wide, no
/// container, netns or CNI_ARGS), or none ran at all (1.6).
#[track_caller]
fn assert_network(cd: &Containerd, fx: &Fixture, unreachable: Option<&str>) {
    let start = Instant::now();
    let (ready, reason, message) = cd.conditions()["NetworkReady"].clone();
    let took = start.elapsed();
    assert!(took < STATUS_BOUND, "the CRI Status took {took:?}");
    match unreachable.filter(|_| cd.version.asks_status()) {
        None => assert!(ready, "NetworkReady false: {reason}: {message}"),
        Some(why) => {
            let agent = format!(
                "vRouter agent at http://{}:{} is unreachable: ",
                fx.sim.ip, fx.sim.port
            );
            assert!(!ready, "NetworkReady with the agent unreachable ({why})");
            assert_eq!(reason, "NetworkPluginNotReady");
            let shown = format!("Network plugin returns error: {agent}");
            assert!(
                message.starts_with(&shown) && message.contains(why),
                "{message}"
            );
            // CNI's "not available", in the plugin's log line of the call.
            let log = fx.node.log();
            let line = log.lines().rfind(|l| l.contains(" STATUS ")).unwrap();
            assert!(line.contains(&format!("(code 50): {agent}")), "{line}");
        }
    }
    let statuses: Vec<[String; 5]> = cd
        .calls()
        .into_iter()
        .filter(|c| c[0] == "STATUS")
        .collect();
    let want = if cd.version.asks_status() {
        cd.statuses()
    } else {
        0
    };
    assert_eq!(
        statuses.len(),
        want,
        "STATUS calls for {} CRI Status",
        cd.statuses()
    );
    for call in statuses {
        assert_eq!(call[1..4], ["", "", ""], "{call:?}");
    }
}
