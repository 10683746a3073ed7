//! The node's request budget to the agent (docs/configuration.md, "Polling and the node's request budget"):
//! every call on the node together sends at most `agent-requests-per-second` requests a second,
//! however many are waiting, frozen calls resumed together too; each waiting call still gets
//! its turn; what starts an ADD's clock (its first look at its pod, its registration) and DELs
//! go before polls; a call that waited less than any lately leaves the polls to those that
//! waited longer; nobody waits beyond their deadline; a call killed or stopped anywhere holds
//! up nobody. The simulator keeps every request with its arrival time (`--log-requests`): the
//! rate and the turns are read from what the agent received.

use std::collections::BTreeMap;
use std::process::Child;
use std::time::{Duration, Instant};

use contrail_testkit::*;
use serde_json::{Value, json};

/// How many requests of each kind (polls, registrations and deregistrations) may go at once on
/// a quiet node (`budget::BURST`): a second of requests is held to the rate plus these.
const BURST: usize = 10;
/// Process starts, netns entry and rollbacks on a busy 2-core machine: a bound's slack, not a
/// benchmark.
const SLACK: Duration = Duration::from_secs(5);

/// The most requests a second of the agent's may hold under a budget of `rate`: the rate and
/// the two lanes' bursts, which bound what the calls send in any second; and what a quarter of a
/// second of the rate adds, because the agent sees a request when it arrives, later than its
/// turn by however long a busy machine took to run the call and the agent's reader (a quarter
/// of a second between one request's turn and its arrival, and none for another's).
fn bound(rate: u32) -> usize {
    rate as usize + 2 * BURST + rate as usize / 4
}

/// `n` one-VMI pods whose IP configurations come `ip_delay_ms` after their registrations.
fn pods(n: usize, ip_delay_ms: u64) -> Vec<PodSpec> {
    (0..n)
        .map(|i| {
            PodSpec::new(vec![
                VmiSpec::new("default", (i % 200) as u8 + 1)
                    .with("ip-delay-ms", json!(ip_delay_ms)),
            ])
        })
        .collect()
}

/// A node whose calls share a budget of `rate` requests a second and may wait `deadline_s`.
fn node(sim: &Sim, rate: u32, deadline_s: u32) -> Node {
    let mut node = Node::new(sim);
    node.set("agent-requests-per-second", json!(rate))
        .set("poll-timeout", json!(1))
        .set("poll-retries", json!(deadline_s));
    node
}

/// One pod's ADD, started as a runtime starts it; the test keeps the process to signal it.
struct Add {
    child: Child,
    started: Instant,
}

impl Add {
    fn start(node: &Node, pod: &PodSpec, cid: &str, ns: &Netns) -> Add {
        let args = pod.multus_args(cid);
        let netns = ns.path();
        let env = node
            .cni("ADD")
            .container(cid)
            .netns(&netns)
            .ifname("eth0")
            .args(&args)
            .environment();
        let conf = node.netconf("1.0.0", "contrail-k8s-cni").to_string();
        Add {
            child: start_plugin(&env, conf.as_bytes()),
            started: Instant::now(),
        }
    }

    fn signal(&self, sig: &str) {
        sh("kill", &[sig, &self.child.id().to_string()]);
    }

    /// Its exit: whether it succeeded, what it printed, how long it took.
    fn finish(self) -> (bool, Value, Duration) {
        let out = finish(self.child);
        let took = self.started.elapsed();
        let printed = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
        (out.ok, printed, took)
    }
}

/// A network namespace and a container id for each of `pods`.
fn sandboxes(pods: &[PodSpec]) -> (Vec<Netns>, Vec<String>) {
    (
        pods.iter().map(|_| Netns::new()).collect(),
        pods.iter().map(|_| uuid()).collect(),
    )
}

/// Each pod's ADD, started at once, in its sandbox.
fn start_all(node: &Node, pods: &[PodSpec], cids: &[String], nss: &[Netns]) -> Vec<Add> {
    pods.iter()
        .zip(cids)
        .zip(nss)
        .map(|((pod, cid), ns)| Add::start(node, pod, cid, ns))
        .collect()
}

/// Every call killed and reaped.
fn kill_all(adds: Vec<Add>) {
    for add in &adds {
        add.signal("-KILL");
    }
    for add in adds {
        add.finish();
    }
}

/// `command` of `pod`'s eth0 in its sandbox, at once; it succeeds.
fn eth0(node: &Node, command: &str, pod: &PodSpec, cid: &str, ns: &Netns) {
    node.cni(command)
        .container(cid)
        .netns(&ns.path())
        .ifname("eth0")
        .args(&pod.multus_args(cid))
        .run(&node.netconf("1.0.0", "contrail-k8s-cni"))
        .assert_ok();
}

/// `pod`'s eth0 DELeted; how long the DEL waited for its turns, as it measured it (its
/// metrics file): not its wall time, which a busy machine stretches.
fn detach(node: &mut Node, pod: &PodSpec, cid: &str, ns: &Netns) -> f64 {
    let collector = TempDir::new();
    let metrics = collector.0.join("metrics.prom");
    node.set("metrics-file", json!(metrics));
    eth0(node, "DEL", pod, cid, ns);
    node.set("metrics-file", Value::Null);
    assert_eq!(ns.ifnames(), ["lo"]);
    budget_wait(&metrics, "DEL")
}

/// The time a call of `command` waited for its turns, as it measured it (its metrics file).
fn budget_wait(metrics: &std::path::Path, command: &str) -> f64 {
    let text = std::fs::read_to_string(metrics).unwrap();
    let key = format!("contrail_cni_budget_wait_seconds_sum{{command=\"{command}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {command} budget wait in {text}"))
}

/// Every request the agent received: (arrival on CLOCK_MONOTONIC in ns, "METHOD path"), a
/// registration's with the VMI it registers ("POST /vm <vmi>").
fn received(sim: &Sim) -> Vec<(u64, String)> {
    let log = sim.get("/sim/log");
    let mut v: Vec<(u64, String)> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let field = |k: &str| r[k].as_str().unwrap().to_string();
            let mut request = format!("{} {}", field("method"), field("path"));
            if let Some(vmi) = r["body"]["vmi-uuid"].as_str() {
                request = format!("{request} {vmi}");
            }
            (r["arrived-ns"].as_u64().unwrap(), request)
        })
        .collect();
    v.sort();
    v
}

/// The most requests the agent received within any one second.
fn busiest_second(log: &[(u64, String)]) -> usize {
    let mut most = 0;
    let mut first = 0;
    for (last, (t, _)) in log.iter().enumerate() {
        while log[first].0 + 1_000_000_000 <= *t {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most
}

/// Per VMI, the longest a call waited for its IP configuration between two requests: from its
/// registration (`POST /vm`) to its first poll (`GET /vm/<vm>/<vmi>`), and between two polls;
/// as a time, and as the number of other requests the agent received meanwhile.
fn longest_poll_gaps(log: &[(u64, String)]) -> BTreeMap<String, (Duration, usize)> {
    let mut last: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    let mut gaps = BTreeMap::new();
    for (i, (t, request)) in log.iter().enumerate() {
        let vmi = match request.split_once(' ') {
            Some(("POST", rest)) => rest.split_once(' ').map(|(_, vmi)| vmi),
            Some(("GET", path)) => path
                .strip_prefix("/vm/")
                .and_then(|p| p.split_once('/'))
                .map(|(_, vmi)| vmi),
            _ => None,
        };
        let Some(vmi) = vmi else { continue };
        if let Some((before, at)) = last.insert(vmi.to_string(), (*t, i)) {
            let gap = gaps.entry(vmi.to_string()).or_insert((Duration::ZERO, 0));
            gap.0 = gap.0.max(Duration::from_nanos(t - before));
            gap.1 = gap.1.max(i - at - 1);
        }
    }
    gaps
}

/// One line per request of `own` in `log`: when it arrived, in ms after the log's first, and
/// how many others arrived before it since the previous one.
fn timeline(log: &[(u64, String)], own: impl Fn(&str) -> bool) -> String {
    let Some(&(start, _)) = log.first() else {
        return String::new();
    };
    let mut others = 0;
    let mut lines = Vec::new();
    for (t, request) in log {
        if own(request) {
            let ms = (t - start) as f64 / 1e6;
            lines.push(format!("  {ms:8.1} ms  {request}  (after {others} others)"));
            others = 0;
        } else {
            others += 1;
        }
    }
    lines.join("\n")
}

/// DEL of each pod's eth0, then nothing of them may be left. The test's budget is lifted
/// first: the DELs of a crowd would otherwise queue past their deadlines, leave their
/// deregistrations pending and so their ports registered.
fn del_all(node: &mut Node, sim: &Sim, pods: &[PodSpec], cids: &[String], nss: &[Netns]) {
    node.set("agent-requests-per-second", json!(1000))
        .set("poll-timeout", json!(1))
        .set("poll-retries", json!(30));
    let node = &*node;
    std::thread::scope(|s| {
        for ((pod, cid), ns) in pods.iter().zip(cids).zip(nss) {
            s.spawn(move || {
                let conf = node.netconf("1.0.0", "contrail-k8s-cni");
                node.cni("DEL")
                    .container(cid)
                    .netns(&ns.path())
                    .ifname("eth0")
                    .args(&pod.multus_args(cid))
                    .run(&conf)
                    .assert_ok();
            });
        }
    });
    assert!(sim.ports().is_empty(), "{:?}", sim.ports());
    assert_eq!(node.leftovers(), [] as [String; 0]);
    for ns in nss {
        assert_eq!(ns.ifnames(), ["lo"]);
    }
}

#[test]
fn a_hundred_and_twenty_waiting_calls_share_the_nodes_budget_and_each_gets_its_turns() {
    let (n, rate) = (120, 40);
    let pods = pods(n, 5000);
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &["--log-requests"]);
    let mut node = node(&sim, rate, 40);
    let (nss, cids) = sandboxes(&pods);
    let adds = start_all(&node, &pods, &cids, &nss);
    for (add, pod) in adds.into_iter().zip(&pods) {
        let (ok, printed, _) = add.finish();
        assert!(ok, "{}: {printed}", pod.name);
    }
    for (pod, ns) in pods.iter().zip(&nss) {
        assert_eq!(ns.mac("eth0"), pod.vmis[0].mac);
    }
    let log = received(&sim);
    // 120 calls waited at once (5 s for their IP configurations after hundreds of requests
    // for their pods and registrations), and the agent never got more than the budget.
    let busiest = busiest_second(&log);
    assert!(
        busiest <= bound(rate),
        "{busiest} requests within one second, budget {rate}"
    );
    // Fair: a waiting call polls again after the others had theirs, never starved. Counted in
    // turns, not seconds (a busy machine stretches the seconds): between a call's registration
    // and its first poll, or between two polls, the agent got at most the other calls' polls
    // and their registrations (each of those a turn ahead of it), their pods' requests, and
    // the bursts. A starved call would see hundreds more: a second of the budget is 40.
    let gaps = longest_poll_gaps(&log);
    assert_eq!(gaps.len(), n, "every call registered and polled");
    let (vmi, (took, others)) = gaps.iter().max_by_key(|(_, g)| g.1).unwrap();
    assert!(
        *others <= 3 * (n - 1) + 3 * BURST,
        "VMI {vmi} waited {took:?} between two polls, while {others} other requests went"
    );
    del_all(&mut node, &sim, &pods, &cids, &nss);
}

#[test]
fn calls_killed_or_stopped_while_they_wait_for_turns_hold_up_nobody() {
    let (n, rate) = (60, 20);
    // No call can be done before the kills: their IP configurations come 8 s after their
    // registrations.
    let pods = pods(n, 8000);
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &["--log-requests"]);
    let mut node = node(&sim, rate, 30);
    let (nss, cids) = sandboxes(&pods);
    let adds = start_all(&node, &pods, &cids, &nss);
    // A third of the calls booked turns and are then killed, another third frozen, while the
    // queue of turns is seconds long.
    wait_for("the queue of turns", Duration::from_secs(10), || {
        received(&sim).len() >= n
    });
    for add in adds.iter().step_by(3) {
        add.signal("-KILL");
    }
    for add in adds.iter().skip(1).step_by(3) {
        add.signal("-STOP");
    }
    let mut stopped = Vec::new();
    for (i, add) in adds.into_iter().enumerate() {
        match i % 3 {
            0 => assert!(!add.finish().0),
            1 => stopped.push(add),
            _ => {
                let (ok, printed, _) = add.finish();
                assert!(ok, "pod {i}: {printed}");
            }
        }
    }
    // The others all finished while a third of the node's calls stayed frozen, and the budget
    // held throughout.
    let busiest = busiest_second(&received(&sim));
    assert!(busiest <= bound(rate), "{busiest}");
    for add in stopped {
        add.signal("-CONT");
        add.finish();
    }
    del_all(&mut node, &sim, &pods, &cids, &nss);
}

#[test]
fn calls_stopped_until_their_turns_passed_resume_within_the_budget_and_behind_a_del() {
    let (n, rate) = (60, 20);
    let mut pods = pods(n, 60_000);
    // One call not stopped: its polls book behind the frozen calls' turns, so its second poll
    // after the stop says their turns have passed.
    let witness = PodSpec::new(vec![
        VmiSpec::new("default", 201).with("ip-delay-ms", json!(60_000)),
    ]);
    pods.push(witness.clone());
    // And one attached before them, whose DEL comes as they resume.
    let early = PodSpec::new(vec![VmiSpec::new("default", 202)]);
    let mut all = pods.clone();
    all.push(early.clone());
    let sim = Sim::start(&all.iter().collect::<Vec<_>>(), &["--log-requests"]);
    let mut node = node(&sim, rate, 40);
    let (early_ns, early_cid) = (Netns::new(), uuid());
    eth0(&node, "ADD", &early, &early_cid, &early_ns);
    let (nss, cids) = sandboxes(&pods);
    let adds = start_all(&node, &pods, &cids, &nss);
    wait_for("every registration", Duration::from_secs(30), || {
        sim.ports().len() == n + 1
    });
    let pids: Vec<String> = adds[..n].iter().map(|a| a.child.id().to_string()).collect();
    let signal = |sig: &str| {
        let mut args = vec![sig];
        args.extend(pids.iter().map(String::as_str));
        sh("kill", &args);
    };
    signal("-STOP");
    let stopped = received(&sim).len();
    let polls = format!("GET /vm/{}/{}", witness.uuid, witness.vmis[0].uuid);
    wait_for(
        "the frozen calls' turns to pass",
        Duration::from_secs(30),
        || {
            received(&sim)[stopped..]
                .iter()
                .filter(|(_, r)| *r == polls)
                .count()
                >= 2
        },
    );
    // All at once, every one of them past its turn: they go no faster than the budget.
    let resumed = received(&sim).len();
    signal("-CONT");
    // Late for their turns, they crowd the admission of the node's sends; the DEL's requests
    // still go first, not among them (a wait of a slot each, not of the crowd's length).
    let waited = detach(&mut node, &early, &early_cid, &early_ns);
    let crowd = n as f64 / f64::from(rate);
    assert!(
        waited < crowd / 5.0,
        "the DEL waited {waited}s for turns among {n} polls late for theirs"
    );
    wait_for(
        "a round of polls after the resume",
        Duration::from_secs(30),
        || received(&sim).len() >= resumed + n,
    );
    let busiest = busiest_second(&received(&sim)[resumed..]);
    assert!(
        busiest <= bound(rate),
        "{busiest} requests within one second once {n} calls late for their turns resumed, \
         budget {rate}"
    );
    kill_all(adds);
    del_all(&mut node, &sim, &pods, &cids, &nss);
}

#[test]
fn a_call_that_waited_less_than_any_lately_leaves_the_polls_to_those_that_waited_longer() {
    let (n, rate) = (20, 40);
    // A crowd that waits long, and one pod whose IP configuration comes 3 s after its
    // registration, ADDed with them: the shortest wait the node knows.
    let mut pods = pods(n, 60_000);
    let teacher = PodSpec::new(vec![
        VmiSpec::new("default", 201).with("ip-delay-ms", json!(3_000)),
    ]);
    // Then a pod whose IP configuration is there at once, ADDed while the crowd polls, and
    // another once the crowd is gone.
    let young = PodSpec::new(vec![VmiSpec::new("default", 202)]);
    let alone = PodSpec::new(vec![VmiSpec::new("default", 203)]);
    pods.extend([teacher.clone(), young.clone(), alone.clone()]);
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &["--log-requests"]);
    let mut node = node(&sim, rate, 40);
    let (nss, cids) = sandboxes(&pods);
    let mut adds = start_all(&node, &pods[..=n], &cids, &nss);
    let (ok, printed, _) = adds.pop().unwrap().finish();
    assert!(ok, "{printed}");
    // The crowd has waited longer than the teacher did: its calls poll in turn, as many as the
    // budget lets them. The young call's would not find anything the teacher's wait says:
    // it waits that long (less a tenth) before it polls, while the crowd's polls go.
    let vmi = &young.vmis[0].uuid;
    let registered = format!("POST /vm {vmi}");
    let polled = format!("GET /vm/{}/{vmi}", young.uuid);
    let add = Add::start(&node, &young, &cids[n + 1], &nss[n + 1]);
    let (ok, printed, _) = add.finish();
    assert!(ok, "{printed}");
    assert_eq!(nss[n + 1].mac("eth0"), young.vmis[0].mac);
    let log = received(&sim);
    let from = log.iter().position(|(_, r)| *r == registered).unwrap();
    let to = log.iter().position(|(_, r)| *r == polled).unwrap();
    let between = &log[from + 1..to];
    // 2.7 s of the crowd's polls, 40 a second (over a hundred); a round of them is n. Counted
    // in requests, not seconds: a busy machine stretches both.
    assert!(
        between.len() >= 3 * n,
        "the young call polled after {} of the crowd's requests",
        between.len()
    );
    // Once nobody else waits, a call polls at once: the budget leaves a call alone untouched.
    // Its own wait for turns, as it measured it (its metrics), is far below the 2.7 s.
    kill_all(adds);
    let collector = TempDir::new();
    let metrics = collector.0.join("metrics.prom");
    node.set("metrics-file", json!(metrics));
    let add = Add::start(&node, &alone, &cids[n + 2], &nss[n + 2]);
    let (ok, printed, _) = add.finish();
    assert!(ok, "{printed}");
    node.set("metrics-file", Value::Null);
    let waited = budget_wait(&metrics, "ADD");
    assert!(waited < 1.0, "a call alone waited {waited}s for turns");
    del_all(&mut node, &sim, &pods, &cids, &nss);
}

#[test]
fn an_adds_first_requests_registrations_and_dels_go_before_a_queue_of_polls() {
    let (n, rate) = (100, 20);
    let mut pods = pods(n, 60_000);
    // One more pod, attached before the crowd comes: its DEL comes while they wait. And one
    // ADDed while they wait.
    let early = PodSpec::new(vec![VmiSpec::new("default", 201)]);
    let late = PodSpec::new(vec![VmiSpec::new("default", 202)]);
    pods.push(early.clone());
    pods.push(late.clone());
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &["--log-requests"]);
    let mut node = node(&sim, rate, 60);
    let (early_ns, early_cid) = (Netns::new(), uuid());
    eth0(&node, "ADD", &early, &early_cid, &early_ns);
    let crowd = &pods[..n];
    let (mut nss, mut cids) = sandboxes(crowd);
    let adds = start_all(&node, crowd, &cids, &nss);
    // Every call of the crowd registered and polls, one turn each in a queue of n/rate = 5 s.
    // (Their 200 requests before their registrations take 10 s of the budget, and at most
    // half of it once the first poll: under 20 s.)
    wait_for("the crowd's registrations", Duration::from_secs(40), || {
        sim.ports().len() == n + 1
    });
    let polled_twice = || {
        let mut polls: BTreeMap<String, usize> = BTreeMap::new();
        for (_, request) in received(&sim) {
            if let Some(path) = request.strip_prefix("GET /vm/") {
                *polls.entry(path.to_string()).or_default() += 1;
            }
        }
        polls.values().filter(|&&k| k >= 2).count()
    };
    wait_for("a round of polls", Duration::from_secs(30), || {
        polled_twice() >= n
    });
    let queue = longest_poll_gaps(&received(&sim))
        .values()
        .map(|g| g.0)
        .max()
        .unwrap();
    assert!(queue >= Duration::from_secs(3), "{queue:?}");
    // The late ADD's look at its pod and its registration start its wait for the IP
    // configuration: they go before the queue, so the agent gets them with a few of the
    // crowd's polls between, not a round of them (n). Counted from when the late ADD holds its
    // attachment's lock (its first step, before any request), not from its spawn: a busy
    // machine may take a second to start a process, and the crowd polls meanwhile.
    let late_ns = Netns::new();
    let late_cid = uuid();
    let late_add = Add::start(&node, &late, &late_cid, &late_ns);
    let locks = node.ports_dir().join(".locks");
    let held = format!("{}@", late.vm_name());
    wait_for("the late ADD's lock", Duration::from_secs(30), || {
        std::fs::read_dir(&locks).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(&held))
        })
    });
    let before = received(&sim).len();
    let vmi = &late.vmis[0].uuid;
    let registered = format!("POST /vm {vmi}");
    wait_for(
        "the late ADD's registration",
        Duration::from_secs(30),
        || received(&sim).iter().any(|(_, r)| *r == registered),
    );
    let log = received(&sim);
    let at = log.iter().position(|(_, r)| *r == registered).unwrap();
    let since_lock = &log[before.min(at)..=at];
    let own = |r: &str| r.contains(&late.vm_name()) || r.contains(vmi.as_str());
    let others = since_lock.iter().filter(|(_, r)| !own(r)).count();
    // Behind the queue, a round of polls (n) would go first; before it, the polls that the
    // budget sends while the late ADD does its own steps (a second or two of them, at `rate`, on
    // a machine whose every core is busy).
    assert!(
        others < n / 2,
        "{others} of the crowd's requests went between the late ADD's lock and its registration; \
         its requests (ms after the first request since the lock, the crowd's before each):\n{}",
        timeline(since_lock, own)
    );
    // The DEL's own wait for its turns (the crowd's calls started without a metrics file).
    let waited = detach(&mut node, &early, &early_cid, &early_ns);
    assert!(
        waited < queue.as_secs_f64() / 4.0,
        "the DEL waited {waited}s for turns with polls queued {queue:?} ahead"
    );
    let (ok, printed, _) = late_add.finish();
    assert!(ok, "{printed}");
    assert_eq!(late_ns.mac("eth0"), late.vmis[0].mac);
    kill_all(adds);
    let mut rest = pods[..n].to_vec();
    rest.push(late);
    cids.push(late_cid);
    nss.push(late_ns);
    del_all(&mut node, &sim, &rest, &cids, &nss);
}

#[test]
fn a_call_never_waits_for_a_turn_beyond_its_deadline() {
    let (n, rate, deadline) = (60, 10, Duration::from_secs(3));
    let pods = pods(n, 0);
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &[]);
    let mut node = node(&sim, rate, deadline.as_secs() as u32);
    let (nss, cids) = sandboxes(&pods);
    let adds = start_all(&node, &pods, &cids, &nss);
    let spawned = adds.last().unwrap().started - adds[0].started;
    let mut refused = 0;
    for add in adds {
        let (ok, printed, took) = add.finish();
        // 60 calls of 3 requests at 10 a second need 18 s: most get no turn in time. The wall
        // time has slack for a busy machine's process starts and rollbacks.
        assert!(took < deadline + SLACK, "{took:?}: {printed}");
        if !ok {
            assert_eq!(printed["code"], 11, "{printed}");
            let msg = printed["msg"].as_str().unwrap();
            assert!(msg.contains("request budget"), "{msg}");
            let seconds = |before: &str, after: &str| -> f64 {
                msg.split_once(before)
                    .and_then(|(_, m)| m.split_once(after))
                    .and_then(|(s, _)| s.parse().ok())
                    .unwrap_or_else(|| panic!("{msg}"))
            };
            // Refused only when its next turn lies beyond its deadline, as the call measured
            // both: what it had waited, and how far that turn was. Not how long it waited:
            // a process a busy machine does not run wakes late, and says so. (Each is
            // rounded to 0.1 s in the message.)
            let (waited, ahead) = (seconds("gave up after ", "s"), seconds("turn is ", "s"));
            assert!(waited + ahead > deadline.as_secs_f64() - 0.1, "{msg}");
            refused += 1;
        }
    }
    // The node hands out `rate` turns a second (and its bursts) over the calls' deadlines,
    // which begin as they were started: most are refused, however slowly a busy machine
    // started them.
    let turns = rate as f64 * (spawned + deadline).as_secs_f64() + 2.0 * BURST as f64;
    let most_done = (turns / 3.0).ceil() as usize;
    assert!(
        refused >= n.saturating_sub(most_done) && refused > 0,
        "{refused} refused, at most {most_done} could be done"
    );
    del_all(&mut node, &sim, &pods, &cids, &nss);
}

#[test]
fn a_budget_of_another_boot_or_not_ours_neither_blocks_a_call_nor_is_followed() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let budget = fx.node.ports_dir().join(".budget");
    std::fs::create_dir_all(fx.node.ports_dir()).unwrap();
    // A schedule booked far ahead by another boot: the magic, another boot's hash, turns
    // booked for days.
    let mut page = vec![0u8; 4096];
    page[..8].copy_from_slice(b"ctrlbgt1");
    page[8..16].copy_from_slice(&7u64.to_le_bytes());
    page[16..24].copy_from_slice(&(u64::MAX / 4).to_le_bytes());
    std::fs::write(&budget, &page).unwrap();
    // Not followed: a followed schedule would refuse the call at once (no turn for days).
    fx.add("eth0", "default");
    fx.del("eth0", "default").assert_ok();
    // Not a schedule at all: a symlink, a FIFO, a file of another size. The call goes on,
    // pacing only itself, and says so in the node's log; the file is left as it is.
    let target = fx.node.config_dir.0.join("target");
    std::fs::write(&target, "not a budget").unwrap();
    let cases: [(&str, &dyn Fn()); 3] = [
        ("a symlink", &|| {
            std::os::unix::fs::symlink(&target, &budget).unwrap()
        }),
        ("a FIFO", &|| {
            sh("mkfifo", &[budget.to_str().unwrap()]);
        }),
        ("another size", &|| {
            std::fs::write(&budget, [1u8; 100]).unwrap()
        }),
    ];
    let refusals = || fx.node.log().matches("request budget").count();
    for (what, make) in cases {
        std::fs::remove_file(&budget).unwrap();
        make();
        let before = refusals();
        fx.add("eth0", "default");
        fx.del("eth0", "default").assert_ok();
        assert!(refusals() > before, "{what}: {}", fx.node.log());
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "not a budget");
    assert_eq!(std::fs::read(&budget).unwrap(), [1u8; 100]);
}

#[test]
fn what_a_pods_teardown_costs_the_agent() {
    // The agent has no per-VMI DELETE for ports registered with POST /vm (DELETE /port/<vmi>
    // touches only POST /port's entries): a DEL drops the pod's ports and registers the others
    // again. Multus DELs a pod's attachments in reverse order.
    let requests = |netns_gone: bool| {
        let mut fx = Fixture::new(vec![
            VmiSpec::new("default", 1),
            VmiSpec::new("net-a", 2),
            VmiSpec::new("net-a", 3),
            VmiSpec::new("net-b", 4),
        ]);
        // 2 s for each request: none answered late is asked again and counted twice.
        fx.set("poll-timeout", json!(2))
            .set("poll-retries", json!(10));
        let attachments = [
            ("eth0", "default"),
            ("net1", "net-a"),
            ("net2", "net-a"),
            ("net3", "net-b"),
        ];
        for (ifname, network) in attachments {
            fx.add(ifname, network);
        }
        if netns_gone {
            fx.remove_netns();
        }
        let before = fx.sim.get("/sim/requests");
        for (ifname, network) in attachments.iter().rev() {
            fx.del(ifname, network).assert_ok();
        }
        assert!(fx.sim.ports().is_empty());
        assert!(!fx.node.pod_dir_exists(&fx.pod));
        assert_eq!(fx.node.leftovers(), [] as [String; 0]);
        for vmi in &fx.pod.vmis {
            assert!(!host_link_exists(&host_ifname(&vmi.uuid)));
        }
        let after = fx.sim.get("/sim/requests");
        let count =
            |kind: &str| after[kind].as_u64().unwrap_or(0) - before[kind].as_u64().unwrap_or(0);
        (count("DELETE /vm/<vm-uuid> 200"), count("POST /vm 200"))
    };
    // With the namespace alive, each DEL re-registers the attachments that stay: 4 DELETEs and
    // 3 + 2 + 1 POSTs, N(N+1)/2 requests in all.
    assert_eq!(requests(false), (4, 6));
    // With it gone (a node rebooted, the runtime removed it), the first DEL drops the pod's
    // ports and registers nothing again: the others' interfaces went with the namespace.
    assert_eq!(requests(true), (1, 0));
}
