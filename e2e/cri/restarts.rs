//! containerd dies and starts again while sandboxes run (an upgrade, a crash; under systemd's
//! `KillMode=process` the shims and the pods live on).

use contrail_testkit::*;

use crate::containerd::Containerd;
use crate::version::Version;
use crate::*;

on_both!(
    containerd_restarted_between_run_and_stop,
    containerd_restarted_with_several_live_sandboxes,
);

/// containerd dies and starts again between RunPodSandbox and StopPodSandbox (an upgrade, a
/// crash): it finds the sandbox again, ready with the same addresses and no second ADD, and
/// its StopPodSandbox releases everything.
fn containerd_restarted_between_run_and_stop(v: Version) {
    let mut pod = running_pod(v, &[]);
    pod.cd.restart();
    let again = assert_attached(
        &pod.cd,
        &pod.fx.sim,
        &pod.fx.node,
        &pod.fx.pod,
        &pod.vmi,
        &pod.id,
    );
    assert_eq!(again, (pod.netns.clone(), pod.host.clone()));
    pod.end();
}

/// containerd dies and starts again while three sandboxes run, one with a container: it finds
/// each whole (ready, the same netns, addresses and host end, its registration and state; the
/// container still running, its eth0 the VMI's) without calling the plugin (no ADD, no DEL, no
/// GC). StopPodSandbox of one after the restart DELs it with its netns and releases only its
/// own attachment; the others' leave nothing.
fn containerd_restarted_with_several_live_sandboxes(v: Version) {
    let Pods {
        vmis,
        pods,
        sim,
        node,
    } = Pods::new(3);
    let mut cd = Containerd::start(v, &node, Some(&conflist()), &[]);
    let ids: Vec<String> = pods.iter().map(|p| cd.run_pod(p)).collect();
    let attach =
        |cd: &Containerd, i: usize| assert_attached(cd, &sim, &node, &pods[i], &vmis[i], &ids[i]);
    let attached: Vec<(String, String)> = (0..ids.len()).map(|i| attach(&cd, i)).collect();
    let probe = cd.start_probe(&ids[0], &pods[0]);
    let before = cd.calls();

    cd.restart();
    for (i, was) in attached.iter().enumerate() {
        assert_eq!(&attach(&cd, i), was, "{} after the restart", pods[i].name);
    }
    let (code, out, err) = cd.exec(&probe, "cat /sys/class/net/eth0/address");
    assert_eq!((code, out.trim()), (0, vmis[0].mac.as_str()), "{err}");
    assert_eq!(
        cd.calls(),
        before,
        "containerd called the plugin as it came back"
    );

    cd.remove_container(&probe);
    cd.stop_pod(&ids[0]);
    let (netns, host) = &attached[0];
    assert_eq!(cd.calls_of("DEL", &ids[0])[0][0], *netns, "the DEL's netns");
    assert_call_logged(&node, "DEL", &ids[0], &pods[0]);
    assert!(!host_link_exists(host), "{host} left");
    assert!(!node.pod_dir_exists(&pods[0]));
    // The others are untouched.
    for (i, was) in attached.iter().enumerate().skip(1) {
        assert_eq!(&attach(&cd, i), was);
    }
    assert_eq!(sim.ports().len(), ids.len() - 1);

    for id in &ids {
        cd.stop_pod(id);
        cd.remove_pod(id);
    }
    let hosts: Vec<String> = attached.into_iter().map(|(_, host)| host).collect();
    assert_all_gone(&cd, &sim, &node, &pods, &ids, &hosts);
}
