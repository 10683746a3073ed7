//! Stress: from a seed, bounded random batches of ADD, DEL, CHECK and GC run at once on a few
//! pods that share a node (the same attachment twice, several calls on one pod, pods in
//! parallel), some calls killed with SIGKILL 0-50 ms in and, in the `crash-points` build, some
//! at a random crash point; now and then a pod's sandbox is replaced without a DEL, as a node
//! reboot does. Then the runtime's DEL of every attachment and a GC, after which nothing may be
//! left: no link, no file or directory, no lock, no registration.
//!
//! Each run draws fresh seeds; a failure prints its seed and the batches it ran. Replay one
//! with `CONTRAIL_STRESS_SEED=<seed> cargo nextest run --release stress`: the seed fixes the
//! calls and their kills, not how the calls of a batch interleave, so a replay may need a few
//! runs.

use std::sync::Barrier;

use contrail_testkit::*;
use serde_json::{Value, json};

/// Seeds per test function; four functions run in parallel.
const CASES: u64 = 8;
/// Batches per seed.
const BATCHES: usize = 50;
/// Each pod's attachments: its interface name and network (net-a twice).
const ATTACHMENTS: [(&str, &str); 3] = [("eth0", "default"), ("net1", "net-a"), ("net2", "net-a")];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Command {
    Add,
    Del,
    Check,
    Gc,
}

/// How a call ends early, if it does.
#[derive(Debug, Clone)]
enum Kill {
    None,
    /// SIGKILL this many milliseconds after the start.
    After(u64),
    /// At this crash point (crash-points build).
    At(&'static str),
}

/// One call of a batch: on which pod (and attachment) and how.
#[derive(Debug, Clone)]
struct Op {
    command: Command,
    pod: usize,
    attachment: usize,
    kill: Kill,
}

/// A batch: calls that start together, and whether a pod's sandbox is then replaced.
#[derive(Debug)]
struct Batch {
    ops: Vec<Op>,
    replace_sandbox: Option<usize>,
}

fn crash_points() -> Vec<&'static str> {
    if cfg!(feature = "crash-points") {
        ADD_STEPS.iter().chain(&DEL_STEPS).copied().collect()
    } else {
        Vec::new()
    }
}

fn op(rng: &mut Rng, pods: usize) -> Op {
    let command = match rng.below(100) {
        0..40 => Command::Add,
        40..70 => Command::Del,
        70..88 => Command::Check,
        _ => Command::Gc,
    };
    let points = crash_points();
    let kill = match rng.below(100) {
        0..20 => Kill::After(rng.below(51)),
        20..35 if !points.is_empty() => {
            let point: &&str = rng.pick(&points);
            Kill::At(point)
        }
        _ => Kill::None,
    };
    Op {
        command,
        pod: rng.below(pods as u64) as usize,
        attachment: rng.below(ATTACHMENTS.len() as u64) as usize,
        kill,
    }
}

/// The batches of a seed.
fn plan(seed: u64, pods: usize) -> Vec<Batch> {
    let mut rng = Rng(seed);
    (0..BATCHES)
        .map(|_| {
            let mut ops: Vec<Op> = (0..1 + rng.below(4)).map(|_| op(&mut rng, pods)).collect();
            // The same call twice at once (a runtime retrying), with its own fate.
            if rng.chance(20) {
                let mut twin = ops[0].clone();
                twin.kill = Kill::None;
                ops.push(twin);
            }
            let replace_sandbox = rng.chance(5).then(|| rng.below(pods as u64) as usize);
            Batch {
                ops,
                replace_sandbox,
            }
        })
        .collect()
}

/// A pod of the node, and its current sandbox.
struct Pod {
    spec: PodSpec,
    ns: Netns,
    cid: String,
}

fn pods() -> Vec<PodSpec> {
    (0..3)
        .map(|_| {
            PodSpec::new(vec![
                VmiSpec::new("default", 1),
                VmiSpec::new("net-a", 2),
                // A wait for the IP configuration to be killed in, on a dual-stack VMI.
                VmiSpec::new("net-a", 3)
                    .dual_stack()
                    .with("ip-delay-ms", json!(30)),
            ])
        })
        .collect()
}

/// Runs one call as its op says; panics on an answer that is not a CNI result or error
/// object (a call that was killed has none).
fn run(node: &Node, pods: &[Pod], op: &Op) {
    let pod = &pods[op.pod];
    let (ifname, network) = ATTACHMENTS[op.attachment];
    let args = pod.spec.multus_args(&pod.cid);
    let netns = pod.ns.path();
    let (mut call, conf) = match op.command {
        Command::Gc => {
            let valid: Vec<Value> = pods
                .iter()
                .flat_map(|p| {
                    ATTACHMENTS
                        .iter()
                        .map(move |(i, _)| json!({"containerID": p.cid, "ifname": i}))
                })
                .collect();
            let mut conf = node.netconf("1.1.0", "contrail-k8s-cni");
            conf["cni.dev/valid-attachments"] = json!(valid);
            (node.cni("GC"), conf)
        }
        c => {
            let name = match c {
                Command::Add => "ADD",
                Command::Del => "DEL",
                _ => "CHECK",
            };
            let call = node
                .cni(name)
                .container(&pod.cid)
                .netns(&netns)
                .ifname(ifname)
                .args(&args);
            (call, node.netconf("1.0.0", network))
        }
    };
    let (wrapper, killable) = match &op.kill {
        Kill::None => (Vec::new(), false),
        Kill::After(ms) => {
            // `timeout 0` would mean no timeout.
            let after = format!("{:.3}", (*ms).max(1) as f64 / 1000.0);
            (
                ["timeout", "-s", "KILL", &after].map(String::from).to_vec(),
                true,
            )
        }
        Kill::At(step) => {
            call = call.env("CONTRAIL_CNI_CRASH_AT", step);
            (Vec::new(), true)
        }
    };
    let out = run_wrapped(
        &wrapper,
        &plugin_bin(),
        &call.environment(),
        conf.to_string().as_bytes(),
    );
    assert!(!out.stderr.contains("panicked"), "{op:?} panicked: {out:?}");
    // A killed call may have printed its result already: the runtime still sees a failure.
    let killed = !out.ok && killable;
    if !out.ok && !killed {
        let v = out.json();
        assert!(
            v["code"].as_u64().is_some() && v["msg"].as_str().is_some(),
            "{op:?}: not a CNI error object: {out:?}"
        );
    }
    if out.ok && op.command == Command::Add {
        assert!(out.json()["interfaces"].is_array(), "{op:?}: {out:?}");
    }
}

/// Runs a batch's calls at once.
fn run_batch(node: &Node, pods: &[Pod], ops: &[Op]) {
    let start = Barrier::new(ops.len());
    std::thread::scope(|s| {
        for op in ops {
            let start = &start;
            s.spawn(move || {
                start.wait();
                run(node, pods, op);
            });
        }
    });
}

fn run_case(seed: u64) {
    let specs = pods();
    let sim = Sim::start(&specs.iter().collect::<Vec<_>>(), &[]);
    let mut node = Node::new(&sim);
    node.set("poll-timeout", json!(0.3))
        .set("poll-retries", json!(3));
    let mut pods: Vec<Pod> = specs
        .into_iter()
        .map(|spec| Pod {
            spec,
            ns: Netns::new(),
            cid: uuid(),
        })
        .collect();
    for batch in plan(seed, pods.len()) {
        run_batch(&node, &pods, &batch.ops);
        if let Some(i) = batch.replace_sandbox {
            // The old netns goes with its veths; its records stay for GC to find.
            pods[i].ns = Netns::new();
            pods[i].cid = uuid();
        }
    }
    // The runtime deletes every pod, then GC runs with nothing left in use; each with the room
    // a busy machine needs to get its deregistrations through (the batches' deadlines were
    // short on purpose).
    node.roomy();
    for pod in &pods {
        for (ifname, network) in ATTACHMENTS {
            let conf = node.netconf("1.0.0", network);
            let args = pod.spec.multus_args(&pod.cid);
            node.cni("DEL")
                .container(&pod.cid)
                .netns(&pod.ns.path())
                .ifname(ifname)
                .args(&args)
                .run(&conf)
                .assert_ok();
        }
    }
    node.gc(json!([])).assert_ok();
    for pod in &pods {
        assert_eq!(pod.ns.ifnames(), ["lo"], "seed {seed}");
        for v in &pod.spec.vmis {
            let tap = host_ifname(&v.uuid);
            assert!(!host_link_exists(&tap), "seed {seed}: {tap} left behind");
        }
    }
    assert_eq!(node.leftovers(), [] as [String; 0], "seed {seed}");
    assert_eq!(sim.ports(), [], "seed {seed}: ports left registered");
}

fn run_seeds(shard: u64) {
    let describe = |seed| format!("{:#?}", plan(seed, 3));
    for_each_seed(
        "CONTRAIL_STRESS_SEED",
        "stress",
        CASES,
        shard,
        describe,
        run_case,
    );
}

#[test]
fn stress_0() {
    run_seeds(0);
}

#[test]
fn stress_1() {
    run_seeds(1);
}

#[test]
fn stress_2() {
    run_seeds(2);
}

#[test]
fn stress_3() {
    run_seeds(3);
}
