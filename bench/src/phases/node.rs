//! Section 7: a full node, rounds of pods with 4 attachments each, the pods in parallel, each
//! pod's attachments in Multus's order; every interface checked, nothing left.

use crate::context::{Ctx, NODE_ATTACHMENTS, check_interrupt};
use crate::error::R;
use crate::measure::{CniEnv, expect_add, expect_del};
use crate::phases::checks::{check_attached, check_nothing_left};
use crate::phases::parallel::{Sequence, all_at_once, span};
use crate::stats::{Stats, stats};

use contrail_testkit::{Netns, PodSpec};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One command for every pod of a full node.
pub(crate) struct Wave {
    /// From the first call's start to the last one's end, ms.
    pub(crate) total: f64,
    /// Each pod's calls, from the start of its first to the end of its last, ms.
    pub(crate) pod: Stats,
    /// Requests the agent served meanwhile.
    pub(crate) requests: u64,
    /// The same by "METHOD route status".
    pub(crate) by_kind: BTreeMap<String, u64>,
    /// Each failed call: pod, interface, what it printed.
    pub(crate) failures: Vec<String>,
}

pub(crate) struct NodeRound {
    pub(crate) pods: usize,
    pub(crate) add: Wave,
    pub(crate) del: Wave,
    /// What the checks after the ADDs and after the DELs found wrong.
    pub(crate) problems: Vec<String>,
}

/// Rounds of `node_sizes` pods with the attachments of `NODE_ATTACHMENTS` each: all pods'
/// ADDs at once (each pod's in Multus's order), the checks, all DELs at once (each pod's in
/// reverse), the checks that nothing is left.
pub(crate) fn full_node(cx: &Ctx) -> R<Vec<NodeRound>> {
    let state = PathBuf::from(
        cx.node.contrail()["config-dir"]
            .as_str()
            .unwrap_or_default(),
    );
    let confs: Vec<PathBuf> = NODE_ATTACHMENTS
        .iter()
        .map(|(_, _, name)| cx.stdin(name))
        .collect::<R<_>>()?;
    eprintln!("  creating {} pod netns", cx.node_pods.len());
    let nss: Vec<Netns> = cx.node_pods.iter().map(|_| Netns::new()).collect();
    let mut rounds = Vec::new();
    for &n in &cx.sizes.node_sizes {
        check_interrupt()?;
        let (pods, nss) = (&cx.node_pods[..n], &nss[..n]);
        eprintln!("  {n} pods x {} attachments", NODE_ATTACHMENTS.len());
        // One sandbox (container id) per pod, all of its attachments' calls in it.
        let sandboxes: Vec<CniEnv> = pods
            .iter()
            .zip(nss)
            .map(|(p, ns)| cx.env(&cx.node, "ADD", ns, &p.name))
            .collect();
        let add = wave(cx, pods, &sandboxes, "ADD", &confs)?;
        let mut problems = check_attached(&cx.sim, pods, nss)?;
        let del = wave(cx, pods, &sandboxes, "DEL", &confs)?;
        problems.extend(check_nothing_left(&cx.sim, pods, nss, &state)?);
        rounds.push(NodeRound {
            pods: n,
            add,
            del,
            problems,
        });
    }
    Ok(rounds)
}

/// `command` for every attachment of every pod: ADD in `NODE_ATTACHMENTS` order, DEL in
/// reverse; the pods in parallel (one thread each).
fn wave(
    cx: &Ctx,
    pods: &[PodSpec],
    sandboxes: &[CniEnv],
    command: &'static str,
    confs: &[PathBuf],
) -> R<Wave> {
    let mut order: Vec<usize> = (0..NODE_ATTACHMENTS.len()).collect();
    if command == "DEL" {
        order.reverse();
    }
    let sequences: Vec<Sequence> = sandboxes
        .iter()
        .map(|sandbox| {
            let sandbox = sandbox.with(command);
            order
                .iter()
                .map(|&k| (sandbox.on(NODE_ATTACHMENTS[k].0), confs[k].as_path()))
                .collect()
        })
        .collect();
    let before = cx.requests_by_kind()?;
    let calls = all_at_once(cx, &sequences, command == "DEL")?;
    let mut by_kind = cx.requests_by_kind()?;
    for (kind, n) in by_kind.iter_mut() {
        *n -= before.get(kind).copied().unwrap_or(0);
    }
    by_kind.retain(|_, n| *n > 0);
    let requests = by_kind.values().sum();
    let mut failures = Vec::new();
    for (pod, calls) in pods.iter().zip(&calls) {
        for (&k, call) in order.iter().zip(calls) {
            let checked = if command == "ADD" {
                expect_add("", call)
            } else {
                expect_del("", call)
            };
            if let Err(e) = checked {
                failures.push(format!("{} {}:{e}", pod.name, NODE_ATTACHMENTS[k].0));
            }
        }
    }
    Ok(Wave {
        total: span(calls.iter().flatten()),
        pod: stats(&calls.iter().map(span).collect::<Vec<_>>()),
        requests,
        by_kind,
        failures,
    })
}
