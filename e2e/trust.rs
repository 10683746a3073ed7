//! A NetworkAttachmentDefinition reaches no further than its own pod. Whoever may create a NAD
//! writes the whole network config (stdin) and chooses CNI_IFNAME and the network's name; the
//! node's admin writes the node-wide file. Every input of the first kind is tried here against
//! the node's settings, files and agent and against another pod, and every test asserts that
//! nothing outside the pod's own attachment changed (files, links, registrations, the requests
//! the agent saw) and that the node's log holds the call.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use contrail_testkit::*;
use serde_json::{Value, json};

/// Every file below `dir` with its bytes (symlinks as their target): a picture to compare.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                todo.push(p.clone());
                out.insert(p, b"<dir>".to_vec());
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&p).unwrap();
                out.insert(p, target.as_os_str().as_encoded_bytes().to_vec());
            } else if meta.is_file() {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            } else {
                out.insert(p, b"<special>".to_vec());
            }
        }
    }
    out
}

/// Two pods of different namespaces on one node: the tenant's (`tenant/a`, attaching to
/// `net-a`) and a victim (`victim/b`, up on its cluster network), plus a directory of files
/// the tenant would like to write, and an endpoint that is not the node's agent.
struct Node2 {
    a: PodSpec,
    b: PodSpec,
    sim: Sim,
    node: Node,
    a_ns: Netns,
    b_ns: Netns,
    a_cid: String,
    b_cid: String,
    victim: TempDir,
    /// On 127.0.0.2, answering for the tenant's pod with the victim's VMI.
    endpoint: Sim,
}

/// The tenant's pod and the victim's.
fn pods() -> (PodSpec, PodSpec) {
    let mut a = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    a.namespace = "tenant".into();
    let mut b = PodSpec::new(vec![VmiSpec::new("default", 3)]);
    b.namespace = "victim".into();
    (a, b)
}

impl Node2 {
    fn new() -> Node2 {
        let (a, b) = pods();
        Node2::with(a, b, &[])
    }

    fn with(a: PodSpec, b: PodSpec, agent_args: &[&str]) -> Node2 {
        let sim = Sim::start(&[&a, &b], agent_args);
        let node = Node::new(&sim);
        let victim = TempDir::new();
        std::fs::write(victim.0.join("precious"), "precious").unwrap();
        let mut forged = a.clone();
        forged.uuid = b.uuid.clone();
        forged.vmis = b.vmis.clone();
        let endpoint = Sim::start_on("127.0.0.2", &[&forged], &[]);
        let n = Node2 {
            a,
            b,
            sim,
            node,
            a_ns: Netns::new(),
            b_ns: Netns::new(),
            a_cid: uuid(),
            b_cid: uuid(),
            victim,
            endpoint,
        };
        n.call_b("ADD").assert_ok();
        n
    }

    fn call_b(&self, command: &str) -> Output {
        let args = self.b.multus_args(&self.b_cid);
        let conf = self.node.netconf("1.0.0", "contrail-k8s-cni");
        self.node
            .cni(command)
            .container(&self.b_cid)
            .netns(&self.b_ns.path())
            .ifname("eth0")
            .args(&args)
            .run(&conf)
    }

    /// The tenant's call on net1 with `conf`.
    fn call_a(&self, command: &str, conf: &Value) -> Output {
        let args = self.a.multus_args(&self.a_cid);
        self.node
            .cni(command)
            .container(&self.a_cid)
            .netns(&self.a_ns.path())
            .ifname("net1")
            .args(&args)
            .run(conf)
    }

    /// The tenant's NAD config for net-a, with `contrail` on top.
    fn nad(&self, contrail: Value) -> Value {
        let mut conf = self.node.netconf("0.3.1", "net-a");
        conf["contrail"] = contrail;
        conf
    }

    /// The victim as it is: its interface, host end, state file bytes and registration; the
    /// tenant's files; the node's state directory.
    fn picture(&self) -> Value {
        let vmi = &self.b.vmis[0];
        json!({
            "b-link": [self.b_ns.mac("eth0"), self.b_ns.addrs("eth0")],
            "b-host": host_link_exists(&host_ifname(&vmi.uuid)),
            "registered": self.sim.ports(),
            "state": format!("{:?}", snapshot(&self.node.ports_dir())),
            "victim": format!("{:?}", snapshot(&self.victim.0)),
            "a-links": self.a_ns.ifnames(),
        })
    }
}

/// Each node-scoped key with a value that would take the plugin somewhere else than the node
/// says: another agent, another state directory, the victim's files, a budget of hours, the
/// node's whole request budget to the agent for itself, a log nobody reads.
fn overrides(n: &Node2) -> Vec<(&'static str, Value)> {
    let victim = |name: &str| json!(n.victim.0.join(name).to_str().unwrap());
    let b_state = n
        .node
        .ports_dir()
        .join(n.b.vm_name())
        .join(&n.b.vmis[0].uuid);
    vec![
        ("vrouter-ip", json!(n.endpoint.ip)),
        ("vrouter-port", json!(n.endpoint.port)),
        ("agent-requests-per-second", json!(1000)),
        ("config-dir", victim("state")),
        ("log-file", victim("evil.log")),
        ("log-file", json!("")),
        ("log-level", json!("off")),
        ("metrics-file", victim("precious")),
        ("metrics-file", json!(b_state.to_str().unwrap())),
        ("poll-timeout", json!(0.01)),
        ("poll-retries", json!(10_000)),
        ("cluster-name", json!("other")),
        ("mode", json!("thick")),
        ("vif-type", json!("macvlan")),
        ("parent-interface", json!("eth9")),
    ]
}

/// ADD, CHECK, GC and STATUS refuse a NAD that sets a node-scoped key to another value than the
/// node's, with code 7 naming the key, the network and the node-wide file, before anything is
/// created or asked; the node's log has the call. Keys x values x commands.
#[test]
fn node_scoped_keys_from_a_nad_are_refused_before_anything_and_logged() {
    let n = Node2::new();
    let before = n.picture();
    let node_file = n.node.node_file();
    for (key, value) in overrides(&n) {
        for command in ["ADD", "CHECK", "GC", "STATUS"] {
            let agent_seen = n.sim.requests();
            let mut conf = n.nad(json!({key: value}));
            if command == "GC" {
                conf["cniVersion"] = json!("1.1.0");
                conf["cni.dev/valid-attachments"] = json!([]);
            }
            let out = n.call_a(command, &conf);
            let case = format!("{command} with contrail.{key}={value}");
            assert_eq!(out.code(), 7, "{case}: {}", out.stdout);
            let msg = out.msg();
            for words in [
                format!("contrail.{key}"),
                "\"net-a\"".to_string(),
                node_file.display().to_string(),
            ] {
                assert!(msg.contains(&words), "{case}: {msg}");
            }
            assert_eq!(n.picture(), before, "{case}");
            assert_eq!(n.sim.requests(), agent_seen, "{case}: the agent was asked");
            assert_eq!(n.endpoint.requests(), 0, "{case}: the endpoint was reached");
            let log = n.node.log();
            let line = format!("{command} container=");
            assert!(
                log.lines().any(|l| l.contains(&line)
                    && l.contains("failed in")
                    && l.contains(&format!("contrail.{key}"))),
                "{case}: not in the node's log"
            );
        }
    }
    assert!(!n.victim.0.join("state").exists() && !n.victim.0.join("evil.log").exists());
}

/// The same values are fine when they are the node's (Multus's delegate configs and existing
/// NADs repeat them); the MTU is the network's to choose.
#[test]
fn a_nad_may_repeat_the_nodes_values_and_choose_its_mtu() {
    let n = Node2::new();
    let mut contrail = n.node.contrail().clone();
    contrail["mtu"] = json!(1400);
    let r = n.call_a("ADD", &n.nad(contrail.clone())).assert_ok().json();
    assert_eq!(n.a_ns.mtu("net1"), 1400);
    assert_eq!(n.a_ns.mac("net1"), n.a.vmis[1].mac);
    let mut check = n.nad(contrail.clone());
    check["prevResult"] = r;
    n.call_a("CHECK", &check).assert_ok();
    n.call_a("DEL", &n.nad(contrail)).assert_ok();
    assert_eq!(n.a_ns.ifnames(), ["lo"]);
    assert_eq!(n.endpoint.requests(), 0);
}

/// A DEL goes through whatever the NAD says (a stale NAD must not keep a pod from going), with
/// the node's settings only: the node's agent and state, never the tenant's.
#[test]
fn del_with_a_nad_that_sets_node_keys_acts_with_the_nodes_settings() {
    let n = Node2::new();
    for (key, value) in overrides(&n) {
        n.call_a("ADD", &n.nad(json!({}))).assert_ok();
        assert_eq!(n.a_ns.ifnames(), ["lo", "net1"], "{key}");
        let before = n.picture();
        let out = n.call_a("DEL", &n.nad(json!({key: value})));
        out.assert_ok();
        assert_eq!(n.a_ns.ifnames(), ["lo"], "{key}={value}: not deleted");
        assert!(!n.node.pod_dir_exists(&n.a), "{key}={value}: state left");
        assert_eq!(n.endpoint.requests(), 0, "{key}={value}");
        let after = n.picture();
        assert_eq!(after["b-link"], before["b-link"]);
        assert_eq!(after["victim"], before["victim"]);
        let b_port = (
            n.b.vmis[0].uuid.clone(),
            host_ifname(&n.b.vmis[0].uuid),
            "eth0".to_string(),
        );
        assert_eq!(n.sim.ports(), [b_port], "{key}={value}: registrations");
        assert!(
            n.node.log().contains(&format!(
                "DEL with the node's settings: invalid network config: contrail.{key}"
            )),
            "{key}: the override is not in the node's log"
        );
    }
}

/// The agent's answer for the tenant's pod that lists the victim's VMI: refused (code 6) when
/// it is annotated as the victim's; when it is annotated as the tenant's (a forged answer),
/// the victim's host interface is still not replaced (code 102). Either way the victim keeps its
/// interface, state and registration.
#[test]
fn an_answer_with_another_pods_vmi_reaches_nothing_of_that_pod() {
    let (a, b) = pods();
    // What the agent says about the victim's VMI...
    let honest = Sim::start(&[&b], &[]);
    let b_cfg = honest.get(&format!("/vm-cfg/{}", b.vm_name()));
    drop(honest);
    // ...and the same under annotations naming the tenant's pod.
    let mut as_tenants = b_cfg.clone();
    for ann in as_tenants[0]["annotations"].as_array_mut().unwrap() {
        match ann.as_str().unwrap() {
            s if s.starts_with("{namespace:") => {
                *ann = json!(format!("{{namespace:{}}}", a.namespace))
            }
            s if s.starts_with("{name:") => *ann = json!(format!("{{name:{}}}", a.name)),
            _ => {}
        }
    }
    let files = TempDir::new();
    for (i, (answer, code, words)) in [
        (
            b_cfg,
            6,
            format!("is not annotated as pod {}/{}'s", a.namespace, a.name),
        ),
        (
            as_tenants,
            102,
            format!("is an attachment of pod {}", b.vm_name()),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let file = files.0.join(format!("cfg-{i}.json"));
        std::fs::write(&file, answer.to_string()).unwrap();
        let respond = format!("GET:/vm-cfg/{}:200:{}", a.vm_name(), file.display());
        let n = Node2::with(a.clone(), b.clone(), &["--respond", &respond]);
        let before = n.picture();
        let conf = n.node.netconf("1.0.0", "contrail-k8s-cni");
        let args = n.a.multus_args(&n.a_cid);
        let out = n
            .node
            .cni("ADD")
            .container(&n.a_cid)
            .netns(&n.a_ns.path())
            .ifname("eth0")
            .args(&args)
            .run(&conf);
        assert_eq!(out.code(), code, "{}", out.stdout);
        assert!(out.msg().contains(&words), "{}", out.msg());
        let after = n.picture();
        for key in ["b-link", "b-host", "registered", "victim", "a-links"] {
            assert_eq!(after[key], before[key], "{key}");
        }
        let b_file = n.node.ports_dir().join(b.vm_name()).join(&b.vmis[0].uuid);
        assert!(
            before["state"]
                .as_str()
                .unwrap()
                .contains(b_file.to_str().unwrap())
        );
        assert!(
            after["state"]
                .as_str()
                .unwrap()
                .contains(b_file.to_str().unwrap())
        );
    }
}

/// The agent's IP configuration of the tenant's VMI must be of the tenant's VM.
#[test]
fn an_ip_configuration_of_another_vm_is_refused() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let files = TempDir::new();
    let honest = Sim::start(&[&fx.pod], &[]);
    honest.register(&fx.pod, 0, &host_ifname(&fx.pod.vmis[0].uuid), "eth0");
    let path = format!("/vm/{}/{}", fx.pod.uuid, fx.pod.vmis[0].uuid);
    let mut ip = honest.get(&path);
    ip[0]["instance-id"] = json!(uuid());
    let file = files.0.join("ip.json");
    std::fs::write(&file, ip.to_string()).unwrap();
    let mut fx = fx;
    fx.restart_agent(&["--respond", &format!("GET:{path}:200:{}", file.display())]);
    let out = fx.call("ADD", "eth0", &fx.conf("default"));
    assert_eq!(out.code(), 6, "{}", out.stdout);
    assert!(out.msg().contains("for another VM"), "{}", out.msg());
    // Rolled back: no interface, no registration; the claim is the attachment's to retry.
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    assert_eq!(fx.sim.ports(), []);
    fx.del("eth0", "default").assert_ok();
    fx.assert_nothing_left();
}

/// A control character in CNI_IFNAME is refused (code 4), and the node's log shows it escaped:
/// every line of the log is one record, starting with its timestamp.
#[test]
fn a_tenant_can_neither_forge_nor_hide_log_lines() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let forged = "2026-01-01T00:00:00.000Z INFO  contrail-k8s-cni[1] ADD ok";
    // An escape sequence in CNI_IFNAME.
    let out = fx.call("ADD", "n\u{1b}[2K1", &fx.conf("net-a"));
    assert_eq!(out.code(), 4);
    assert!(
        out.msg().contains("CNI_IFNAME") && out.msg().contains("control"),
        "{}",
        out.msg()
    );
    // Unknown keys by the ten thousand, one with a line of its own in its name, and a requested
    // IP that carries one too: one summary line, the rest escaped.
    let mut keys = serde_json::Map::new();
    for i in 0..60_000 {
        keys.insert(format!("k{i}"), json!(1));
    }
    keys.insert(format!("x\n{forged}"), json!(1));
    let mut conf = fx.conf("default");
    conf["contrail"] = Value::Object(keys);
    conf["runtimeConfig"] = json!({"ips": [format!("10.0.0.9\n{forged}")]});
    let args = format!("{};IP=10.0.0.8\n{forged}", fx.args());
    fx.node
        .cni("ADD")
        .container(&fx.cid)
        .netns(&fx.ns.path())
        .ifname("eth0")
        .args(&args)
        .run(&conf)
        .assert_ok();
    let log = fx.node.log();
    assert!(!log.contains('\u{1b}'), "a raw escape sequence in the log");
    for line in log.lines() {
        assert!(
            line.starts_with("20") && line.as_bytes()[10] == b'T',
            "not a record: {line:?}"
        );
    }
    assert!(!log.lines().any(|l| l.starts_with(forged)), "a forged line");
    let summaries: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("unknown key(s)"))
        .collect();
    assert_eq!(summaries.len(), 1, "{summaries:?}");
    assert!(
        summaries[0].contains("ignoring 60001 unknown key(s)"),
        "{}",
        summaries[0]
    );
    assert!(log.len() < 64 * 1024, "the log grew to {} bytes", log.len());
    assert!(!fx.node.config_dir.0.join("cni.log.1").exists(), "rotated");
    assert!(
        log.contains("\\u{1b}[2K"),
        "the refused ifname is not shown escaped"
    );
    fx.del("eth0", "default").assert_ok();
}

/// The node's log and metrics files are opened as state files are: a symlink there is not
/// followed, a FIFO or device hangs nothing; the call goes on and says so.
#[test]
fn odd_log_and_metrics_files_are_refused_never_followed() {
    let mut fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let dir = TempDir::new();
    let precious = dir.0.join("precious");
    std::fs::write(&precious, "precious").unwrap();
    let link = dir.0.join("link");
    std::os::unix::fs::symlink(&precious, &link).unwrap();
    let fifo = dir.0.join("fifo");
    sh("mkfifo", &[fifo.to_str().unwrap()]);
    let zero = dir.0.join("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    // A wrapper that turns a hang into a failure of this test rather than of the machine.
    fx.node.wrapper = ["timeout", "20"].map(String::from).to_vec();
    let log = json!(fx.node.config_dir.0.join("cni.log"));
    for (key, path, why) in [
        ("log-file", &link, "a symbolic link"),
        ("log-file", &fifo, "a FIFO"),
        ("metrics-file", &link, "a symbolic link"),
        ("metrics-file", &fifo, "a FIFO"),
        ("metrics-file", &zero, "a symbolic link"),
    ] {
        fx.set(key, json!(path));
        let started = Instant::now();
        let out = fx.call("ADD", "eth0", &fx.conf("default"));
        out.assert_ok();
        fx.del("eth0", "default").assert_ok();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{key}={}",
            path.display()
        );
        // Without its log file the plugin says why on stderr; the metrics' trouble is logged.
        let said = if key == "log-file" {
            out.stderr.clone()
        } else {
            fx.node.log()
        };
        assert!(said.contains(why), "{key}={}: {said}", path.display());
        fx.set("log-file", log.clone())
            .set("metrics-file", Value::Null);
    }
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "precious");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    fx.assert_nothing_left();
}

/// Polls never come faster than 50 a second (beyond the two early ones) whatever poll-timeout
/// says: the agent serves the whole node.
#[test]
fn a_waiting_call_polls_at_most_fifty_times_a_second() {
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1).with("ip-delay-ms", json!(600_000)),
    ]);
    fx.set("poll-timeout", json!(0.01))
        .set("poll-retries", json!(100));
    let started = Instant::now();
    let out = fx.call("ADD", "eth0", &fx.conf("default"));
    let waited = started.elapsed();
    assert_eq!(out.code(), 11, "{}", out.stdout);
    // The polls for the IP configuration: the first, two early ones (5 and 15 ms after it),
    // then one every 21 ms, whether each was answered or timed out (a 10 ms timeout on a busy
    // machine). The waits before them (/vm-cfg, POST /vm) are the same for any poll-timeout.
    let by_kind = fx.sim.get("/sim/requests");
    let polls: u64 = by_kind
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("GET /vm/<vm-uuid>/<vmi-uuid> "))
        .map(|(_, n)| n.as_u64().unwrap())
        .sum();
    let bound = 3 + waited.as_millis() as u64 / 21 + 1;
    assert!(polls <= bound, "{polls} polls in {waited:?}: {by_kind}");
    fx.del("eth0", "default").assert_ok();
}

/// A DEL ends an ADD that waits for its pod to be complete, not only one that waits for its IP
/// configuration.
#[test]
fn a_del_stops_an_add_waiting_for_its_pod() {
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("cfg-delay-ms", json!(600_000)),
    ]);
    fx.set("poll-timeout", json!(1))
        .set("poll-retries", json!(60));
    std::thread::scope(|s| {
        let add = s.spawn(|| {
            let started = Instant::now();
            (
                fx.call("ADD", "eth0", &fx.conf("default")),
                started.elapsed(),
            )
        });
        wait_for("the ADD to poll", Duration::from_secs(10), || {
            fx.sim.requests() >= 2
        });
        fx.del("eth0", "default").assert_ok();
        let (out, took) = add.join().unwrap();
        assert_eq!(out.code(), 102, "{}", out.stdout);
        assert!(
            out.msg().contains("a DEL of this attachment came"),
            "{}",
            out.msg()
        );
        assert!(took < Duration::from_secs(30), "the ADD waited {took:?}");
    });
    fx.assert_nothing_left();
}

/// GC skips a pod that a call is working on (here: a DEL whose deregistration the agent does
/// not answer) instead of waiting for it, and releases the others.
#[test]
fn gc_never_waits_for_a_busy_pod() {
    let a = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let b = PodSpec::new(vec![VmiSpec::new("default", 3)]);
    let sim = Sim::start(&[&a, &b], &["--hang", &format!("DELETE:/vm/{}", a.uuid)]);
    let mut node = Node::new(&sim);
    node.set("poll-timeout", json!(1))
        .set("poll-retries", json!(10));
    let (a_ns, b_ns) = (Netns::new(), Netns::new());
    let (a_cid, b_cid) = (uuid(), uuid());
    let call = |pod: &PodSpec, cid: &str, ns: &Netns, cmd: &str, ifname: &str, network: &str| {
        node.cni(cmd)
            .container(cid)
            .netns(&ns.path())
            .ifname(ifname)
            .args(&pod.multus_args(cid))
            .run(&node.netconf("1.0.0", network))
    };
    call(&a, &a_cid, &a_ns, "ADD", "eth0", "default").assert_ok();
    call(&a, &a_cid, &a_ns, "ADD", "net1", "net-a").assert_ok();
    call(&b, &b_cid, &b_ns, "ADD", "eth0", "default").assert_ok();
    drop(b_ns);
    let asked = sim.requests();
    std::thread::scope(|s| {
        let del = s.spawn(|| call(&a, &a_cid, &a_ns, "DEL", "net1", "net-a"));
        // Its one request, DELETE /vm/<pod>, is the one the agent does not answer.
        wait_for(
            "the DEL to wait for the agent",
            Duration::from_secs(10),
            || sim.requests() > asked,
        );
        let gc = node.gc(json!([{"containerID": a_cid, "ifname": "eth0"}]));
        gc.assert_ok();
        assert!(!del.is_finished(), "GC waited for the busy pod");
        assert!(
            !node.pod_dir_exists(&b),
            "the gone sandbox was not released"
        );
        assert!(node.log().contains(&format!("pod {} is busy", a.vm_name())));
        del.join().unwrap().assert_ok();
    });
    assert_eq!(a_ns.ifnames(), ["eth0", "lo"]);
}

/// The agent's requests per ADD do not grow with the number of VMIs of a repeated network: the
/// registration of a VMI is looked up only for the one being chosen.
#[test]
fn requests_per_add_do_not_grow_with_a_repeated_network() {
    let mut vmis = vec![VmiSpec::new("default", 1)];
    vmis.extend((2..=7).map(|n| VmiSpec::new("net-a", n)));
    let mut fx = Fixture::new(vmis);
    // 2 s for each request: none answered late is asked again and counted twice.
    fx.set("poll-timeout", json!(2))
        .set("poll-retries", json!(10));
    fx.add("eth0", "default");
    let mut per_add = Vec::new();
    for k in 1..=6 {
        let before = fx.sim.requests();
        fx.add(&format!("net{k}"), "net-a");
        per_add.push(fx.sim.requests() - before);
    }
    // /vm-cfg, the chosen VMI's registration, POST /vm, its IP configuration.
    assert_eq!(per_add, [4; 6]);
    for k in (1..=6).rev() {
        fx.del(&format!("net{k}"), "net-a").assert_ok();
    }
    fx.del("eth0", "default").assert_ok();
    fx.assert_nothing_left();
}
