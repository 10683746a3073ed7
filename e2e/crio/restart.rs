//! CRI-O restarted under its sandboxes (an upgrade, a crash): at each start it GCs the plugin
//! with every sandbox it knows (ready, stopped, and those whose netns vanished meanwhile), then
//! DELs each sandbox it cannot restore (its netns is gone) and CHECKs each ready one it restores
//! before its CRI answers.

use std::collections::BTreeSet;

use contrail_testkit::*;
use serde_json::Value;

use super::runtime::Crio;
use super::{
    IFNAME, PLUGIN, assert_attached, assert_no_gc_failed, assert_nothing_left, assert_released,
    crashed_runtimes_leftover, crio_args, gc_at_start,
};

/// The containers a GC lists as valid; each with CRI-O's interface.
#[track_caller]
fn listed(gc_stdin: &Value) -> BTreeSet<String> {
    gc_stdin["cni.dev/valid-attachments"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {gc_stdin}"))
        .iter()
        .map(|a| {
            assert_eq!(a["ifname"], IFNAME, "{a}");
            a["containerID"].as_str().unwrap().to_string()
        })
        .collect()
}

/// The plugin's calls since call `from`, sorted: at a start, the restore CHECKs (before the CRI
/// answers) and the DELs of what CRI-O could not restore do not wait for STATUS, after which GC
/// runs.
fn calls_since(crio: &Crio, from: usize) -> Vec<(String, String)> {
    let mut calls = crio.plugin_calls(from);
    calls.sort();
    calls
}

/// Three pods: one that lives through everything, one whose netns vanishes while CRI-O is down,
/// one stopped (not removed) before; and the attachment of a sandbox a crashed runtime left.
/// CRI-O stopped (SIGTERM) and started: its GC lists the three, the plugin keeps them and
/// releases the unlisted leftover; the live pod's restore CHECK passes and it stays whole (MAC,
/// address, port, state file, no second ADD); the vanished one gets one DEL with its old netns
/// path and nothing of it is left, CRI-O forgets it; the stopped one gets no call. CRI-O killed
/// (a crash) and started: the same for the two it still knows. The live pod's stop then DELs
/// it once, cleanly, and removing both leaves nothing.
#[test]
fn restarts_with_live_stopped_and_vanished_sandboxes() {
    enter_node();
    let vmis: Vec<VmiSpec> = (1..=4).map(|n| VmiSpec::new("default", n)).collect();
    let pods: Vec<PodSpec> = vmis.iter().map(|v| PodSpec::new(vec![v.clone()])).collect();
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &[]);
    let node = Node::new(&sim);
    let mut crio = Crio::with_shipped_conflist(&node);
    let ids: Vec<String> = pods[..3].iter().map(|p| crio.run_pod(p)).collect();
    let attached: Vec<_> = (0..3)
        .map(|k| assert_attached(&crio, &sim, &node, &pods[k], &vmis[k], &ids[k]))
        .collect();
    let [live, vanished, stopped] = [0, 1, 2];
    crio.stop_pod(&ids[stopped]);
    assert_released(&sim, &node, &pods[stopped], &vmis[stopped]);

    crio.stop();
    let holder = crashed_runtimes_leftover(&node, &pods[3]);
    // The node's cleanup takes the netns while CRI-O is down: its pinned file goes, and with
    // nothing holding it, the namespace and the pod's veth pair.
    let gone = &attached[vanished].netns;
    sh("umount", &[gone]);
    std::fs::remove_file(gone).unwrap();
    let from = crio.calls().len();
    crio.start();
    let gc = gc_at_start(&crio, from);
    assert_eq!(gc.rc, 0, "{gc:?}");
    assert_eq!(listed(&gc.stdin), ids.iter().cloned().collect());
    assert_released(&sim, &node, &pods[3], &vmis[3]);
    drop(holder);
    let del = |from: usize| {
        crio.calls()[from..]
            .iter()
            .find(|c| c.plugin == PLUGIN && c.command == "DEL")
            .cloned()
    };
    wait_for(
        "the DEL of the sandbox CRI-O could not restore",
        super::runtime::BOUND,
        || del(from).is_some(),
    );
    let del = del(from).unwrap();
    assert_eq!(del.container, ids[vanished]);
    assert_eq!(del.netns, *gone, "the vanished netns's path");
    assert_eq!(del.args, crio_args(&pods[vanished], &ids[vanished]));
    assert_eq!(del.rc, 0);
    wait_for(
        "the vanished pod's host end to go",
        super::runtime::BOUND,
        || !host_link_exists(&attached[vanished].host),
    );
    assert_released(&sim, &node, &pods[vanished], &vmis[vanished]);
    assert_eq!(
        calls_since(&crio, from),
        [
            ("CHECK".into(), ids[live].clone()),
            ("DEL".into(), ids[vanished].clone()),
            ("GC".into(), String::new()),
            ("STATUS".into(), String::new()),
        ]
    );
    assert_eq!(
        crio.pods().into_iter().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            (ids[live].clone(), "SANDBOX_READY".into()),
            (ids[stopped].clone(), "SANDBOX_NOTREADY".into())
        ])
    );
    let again = assert_attached(&crio, &sim, &node, &pods[live], &vmis[live], &ids[live]);
    assert_eq!(again.netns, attached[live].netns);

    crio.kill();
    let from = crio.calls().len();
    crio.start();
    let gc = gc_at_start(&crio, from);
    assert_eq!(
        listed(&gc.stdin),
        [&ids[live], &ids[stopped]].map(Clone::clone).into()
    );
    assert_eq!(
        calls_since(&crio, from),
        [
            ("CHECK".into(), ids[live].clone()),
            ("GC".into(), String::new()),
            ("STATUS".into(), String::new()),
        ]
    );
    assert_attached(&crio, &sim, &node, &pods[live], &vmis[live], &ids[live]);

    let from = crio.calls().len();
    crio.stop_pod(&ids[live]);
    assert_eq!(crio.plugin_calls(from), [("DEL".into(), ids[live].clone())]);
    assert_released(&sim, &node, &pods[live], &vmis[live]);
    for id in [&ids[live], &ids[stopped]] {
        crio.remove_pod(id);
    }
    assert_eq!(crio.plugin_calls(from).len(), 1, "no call at the removals");
    assert_no_gc_failed(&crio);
    assert_nothing_left(&crio, &sim, &node);
}
