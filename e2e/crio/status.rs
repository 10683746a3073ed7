//! STATUS: CRI-O 1.36 sends it to its default network only, from its start every 500 ms until
//! it first passes (`cni_status_grace_period` 0, the default: never again after that), and
//! holds RunPodSandbox and its GC until then.

use contrail_testkit::*;

use super::runtime::{BOUND, Crio};
use super::{PLUGIN, assert_attached, assert_nothing_left, assert_released};

/// The line CRI-O logs while a RunPodSandbox waits for the network.
const WAITING: &str = "CNI plugin not ready. Waiting to create";

/// The agent is down when CRI-O starts: every STATUS fails (the plugin says the agent is
/// unreachable), the CRI answers with `NetworkReady` false and that message, a RunPodSandbox
/// waits (no ADD) and so does the GC. The agent back (another port in the node-wide file): the
/// next STATUS passes, `NetworkReady` turns true, the waiting RunPodSandbox goes on (ADD, CHECK:
/// the pod attached), the GC runs right after; no STATUS after the one that passed.
#[test]
fn status_holds_pods_until_the_agent_answers() {
    let vmi = VmiSpec::new("default", 5);
    let mut fx = Fixture::new(vec![vmi.clone()]);
    fx.stop_agent();
    let crio = Crio::with_shipped_conflist(&fx.node);
    let (ready, reason, message) = crio.network_ready();
    assert!(!ready, "NetworkReady with the agent down");
    assert!(
        message.contains("unreachable"),
        "the plugin's message: {reason}: {message}"
    );
    let mut run = crio.spawn_run_pod(&fx.pod);
    wait_for("RunPodSandbox to wait for the network", BOUND, || {
        crio.log().contains(WAITING)
    });
    // A few rounds of STATUS while the agent is down, RunPodSandbox still waiting.
    let failed_status = || {
        let calls = crio.calls();
        calls
            .iter()
            .filter(|c| c.plugin == PLUGIN && c.command == "STATUS" && c.rc != 0)
            .count()
    };
    wait_for("three failing STATUS", BOUND, || failed_status() >= 3);
    assert!(run.try_wait().unwrap().is_none(), "RunPodSandbox went on");
    let failing = crio.calls();
    assert!(
        failing.iter().all(|c| c.plugin != PLUGIN
            || c.command == "VERSION"
            || (c.command == "STATUS" && c.rc != 0)),
        "only failing STATUS while the agent is down: {failing:?}"
    );

    fx.restart_agent(&[]);
    wait_for("NetworkReady", BOUND, || crio.network_ready().0);
    let id = crio.finish(run);
    assert_attached(&crio, &fx.sim, &fx.node, &fx.pod, &vmi, &id);
    let calls: Vec<_> = crio
        .calls()
        .into_iter()
        .filter(|c| c.plugin == PLUGIN && c.command != "VERSION")
        .collect();
    let statuses: Vec<_> = calls.iter().filter(|c| c.command == "STATUS").collect();
    let (passed, failed) = statuses.split_last().unwrap();
    assert!(
        !failed.is_empty() && failed.iter().all(|c| c.rc != 0),
        "{statuses:?}"
    );
    assert_eq!(passed.rc, 0, "{passed:?}");
    let gc = calls.iter().find(|c| c.command == "GC").expect("a GC");
    assert_eq!(gc.rc, 0, "{gc:?}");
    assert!(gc.at >= passed.at, "GC before STATUS passed: {calls:?}");
    let add = calls.iter().find(|c| c.command == "ADD").unwrap();
    assert!(add.at >= passed.at, "ADD before STATUS passed: {calls:?}");
    let gaps: Vec<f64> = failed.windows(2).map(|w| w[1].at - w[0].at).collect();
    eprintln!(
        "{} failing STATUS, {:.3} s apart on average; STATUS passed {:.3} s before the ADD",
        failed.len(),
        gaps.iter().sum::<f64>() / gaps.len().max(1) as f64,
        add.at - passed.at
    );

    crio.stop_pod(&id);
    assert_released(&fx.sim, &fx.node, &fx.pod, &vmi);
    crio.remove_pod(&id);
    let after = crio.calls();
    let after: Vec<_> = after
        .iter()
        .filter(|c| c.plugin == PLUGIN && c.command == "STATUS")
        .collect();
    assert_eq!(
        after.len(),
        statuses.len(),
        "STATUS after it passed: {:#?}\n{}",
        crio.calls()
            .iter()
            .map(|c| (c.plugin.clone(), c.command.clone(), c.at, c.rc))
            .collect::<Vec<_>>(),
        crio.log()
    );
    assert_nothing_left(&crio, &fx.sim, &fx.node);
}
