//! What a pod with NET_ADMIN, a runtime that retries, calls that are stopped mid-way and a
//! NetworkAttachmentDefinition edited into nonsense must not break (issue 28): the pod's tampering
//! is done with `ip -n` as the pod would, the calls are the release binary's. Each checks that
//! the agent's registrations still follow the state files and that no call outlived its deadline.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use contrail_testkit::*;
use serde_json::json;

/// The testkit node's deadline (poll-timeout 0.5 s x poll-retries 6), and what process start and
/// netns entry add on a loaded 2-core CI machine: a correctness bound, not a benchmark.
const DEADLINE: Duration = Duration::from_secs(3);
const SLACK: Duration = Duration::from_secs(3);

fn repeated_network() -> Fixture {
    Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
    ])
}

/// `ip -n <pod> ...`, as the pod would run it.
fn in_pod(fx: &Fixture, args: &[&str]) {
    let mut all = vec!["-n", fx.ns.name.as_str()];
    all.extend_from_slice(args);
    sh("ip", &all);
}

fn state_file(fx: &Fixture, k: usize) -> PathBuf {
    fx.node
        .ports_dir()
        .join(fx.pod.vm_name())
        .join(&fx.pod.vmis[k].uuid)
}

/// A call under `timeout 30`: a call that would wait forever fails the test instead of hanging
/// it, and its time is measured.
fn bounded(fx: &mut Fixture, command: &str, ifname: &str, network: &str) -> (Output, Duration) {
    fx.node.wrapper = ["timeout", "30"].map(String::from).to_vec();
    let started = Instant::now();
    let out = fx.call(command, ifname, &fx.conf(network));
    fx.node.wrapper.clear();
    (out, started.elapsed())
}

#[test]
fn a_retried_add_beside_a_link_of_its_name_that_is_not_its_own_changes_nothing() {
    let fx = repeated_network();
    fx.add("eth0", "default");
    fx.add("net1", "net-a");
    let before = std::fs::read(state_file(&fx, 1)).unwrap();
    let registered = fx.registered();
    // The pod renames its net1 away and makes a net1 of its own.
    in_pod(&fx, &["link", "set", "net1", "down"]);
    in_pod(&fx, &["link", "set", "net1", "name", "old1"]);
    in_pod(
        &fx,
        &["link", "add", "net1", "type", "veth", "peer", "name", "x1"],
    );
    // The runtime sends the same ADD again: refused before anything changes.
    let out = fx.call("ADD", "net1", &fx.conf("net-a"));
    assert_eq!(out.code(), 102, "{}", out.stdout);
    assert!(out.msg().contains("net1 already exists"), "{}", out.msg());
    assert_eq!(std::fs::read(state_file(&fx, 1)).unwrap(), before);
    assert_eq!(fx.registered(), registered);
    assert_eq!(
        fx.ns.mac("old1"),
        fx.pod.vmis[1].mac,
        "the attachment's interface"
    );
    assert!(host_link_exists(&host_ifname(&fx.pod.vmis[1].uuid)));
    fx.assert_registrations_follow_files();
    // Its DEL releases it, registration and all; the pod's own net1 is the pod's.
    fx.del("net1", "net-a").assert_ok();
    fx.assert_registrations_follow_files();
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo", "net1", "x1"]);
    in_pod(&fx, &["link", "del", "net1"]);
    // The next ADDs of the repeated network get their own VMIs, in order.
    fx.add("net1", "net-a");
    fx.add("net2", "net-a");
    assert_eq!(fx.ns.mac("net1"), fx.pod.vmis[1].mac);
    assert_eq!(fx.ns.mac("net2"), fx.pod.vmis[2].mac);
    fx.assert_registrations_follow_files();
    for (ifname, network) in [("net2", "net-a"), ("net1", "net-a"), ("eth0", "default")] {
        fx.del(ifname, network).assert_ok();
    }
    fx.assert_nothing_left();
}

#[test]
fn a_retried_add_that_fails_puts_back_the_record_it_rewrote() {
    let mut fx = repeated_network();
    fx.add("eth0", "default");
    fx.add("net1", "net-a");
    let before = std::fs::read(state_file(&fx, 1)).unwrap();
    // The retry replaces the interface, registers it again, then finds no IP configuration in
    // time (the agent lost it): its rollback leaves the attachment recorded and registered as
    // it was, not a reservation beside a registration no file explains.
    fx.restart_agent(&["--hang", "GET:/vm/"]);
    let out = fx.call("ADD", "net1", &fx.conf("net-a"));
    assert_eq!(out.code(), 11, "{}", out.stdout);
    assert_eq!(std::fs::read(state_file(&fx, 1)).unwrap(), before);
    assert_eq!(fx.node.reservations(&fx.pod), [] as [String; 0]);
    fx.restart_agent(&[]);
    // (The restarted agent knows nothing: the pod's next call registers its files again.)
    fx.del("net1", "net-a").assert_ok();
    fx.assert_registrations_follow_files();
    fx.del("eth0", "default").assert_ok();
    fx.assert_nothing_left();
}

/// A plugin process started as a runtime starts it, kept to signal it.
fn spawn(fx: &Fixture, command: &str, ifname: &str, network: &str) -> Child {
    let args = fx.args();
    let netns = fx.ns.path();
    let env = fx
        .node
        .cni(command)
        .container(&fx.cid)
        .netns(&netns)
        .ifname(ifname)
        .args(&args)
        .environment();
    start_plugin(&env, fx.conf(network).to_string().as_bytes())
}

fn signal(child: &Child, sig: &str) {
    sh("kill", &[sig, &child.id().to_string()]);
}

#[test]
fn a_del_waits_for_a_stopped_add_no_longer_than_its_deadline() {
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1).with("ip-delay-ms", json!(60_000)),
    ]);
    let add = spawn(&fx, "ADD", "eth0", "default");
    wait_for("the ADD's veth", Duration::from_secs(10), || {
        fx.ns.ifnames().contains(&"eth0".to_string())
    });
    // Frozen (SIGSTOP, a frozen cgroup) while it holds the attachment's lock.
    signal(&add, "-STOP");
    let (out, took) = bounded(&mut fx, "DEL", "eth0", "default");
    assert_eq!(out.code(), 11, "{}", out.stdout);
    assert!(
        out.msg().contains("another call has held it"),
        "{}",
        out.msg()
    );
    assert!(took < DEADLINE + SLACK, "{took:?}");
    // Thawed, the ADD sees the DEL's request to stop and rolls back; the runtime's next DEL
    // finds nothing left to do.
    signal(&add, "-CONT");
    assert!(!finish(add).ok);
    fx.del("eth0", "default").assert_ok();
    fx.assert_nothing_left();
}

#[test]
fn a_stopped_holder_of_a_pods_lock_holds_no_call_beyond_its_deadline() {
    let mut fx = repeated_network();
    fx.add("eth0", "default");
    // A call frozen while it holds the pod's lock: here, a process holding that flock.
    let lock = fx.node.ports_dir().join(".locks").join(fx.pod.vm_name());
    // --no-fork: the process holding the lock is the one killed below.
    let mut holder = Command::new("flock")
        .arg("--no-fork")
        .arg(&lock)
        .args(["sleep", "600"])
        .spawn()
        .unwrap();
    wait_for("the lock held", Duration::from_secs(5), || {
        try_sh("flock", &["-n", lock.to_str().unwrap(), "true"]).is_err()
    });
    for (command, ifname, network) in [
        ("ADD", "net1", "net-a"),
        ("CHECK", "eth0", "default"),
        ("DEL", "eth0", "default"),
    ] {
        let (out, took) = bounded(&mut fx, command, ifname, network);
        assert_eq!(out.code(), 11, "{command}: {}", out.stdout);
        assert!(out.msg().contains(".locks/"), "{command}: {}", out.msg());
        assert!(took < DEADLINE + SLACK, "{command}: {took:?}");
    }
    let _ = holder.kill();
    let _ = holder.wait();
    fx.assert_registrations_follow_files();
    fx.del("net1", "net-a").assert_ok();
    fx.del("eth0", "default").assert_ok();
    fx.assert_nothing_left();
}

#[test]
fn a_del_whose_config_cannot_be_read_releases_the_attachment() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let huge = format!(
        r#"{{"cniVersion":"1.0.0","name":"x","pad":"{}"}}"#,
        "a".repeat(2 << 20)
    );
    let cut = r#"{"cniVersion":"1.0.0","name":"contrail-k8s"#.to_string();
    for stdin in [huge, cut] {
        fx.add("eth0", "default");
        let args = fx.args();
        let out = run_plugin(
            &fx.node
                .cni("DEL")
                .container(&fx.cid)
                .netns(&fx.ns.path())
                .ifname("eth0")
                .args(&args)
                .environment(),
            stdin.as_bytes(),
        );
        out.assert_ok();
        fx.assert_nothing_left();
        assert!(
            fx.node.log().contains("its network config cannot be read"),
            "{}",
            fx.node.log()
        );
    }
    // Any other command still refuses such a config.
    let out = fx.call("ADD", "eth0", &json!("not an object"));
    assert_eq!(out.code(), 7, "{}", out.stdout);
}

#[test]
fn a_refusal_names_a_missing_node_wide_file_once_and_the_log_names_the_pod() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    std::fs::remove_file(fx.node.node_file()).unwrap();
    // Without a node-wide file the log is the default one: on a tmpfs of this test's node, not
    // the machine's /var/log.
    sh("mount", &["-t", "tmpfs", "tmpfs", "/var/log"]);
    let mut conf = fx.conf("net-a");
    conf["contrail"] = json!({"vrouter-port": 1});
    let out = fx.call("ADD", "eth0", &conf);
    assert_eq!(out.code(), 7, "{}", out.stdout);
    let msg = out.msg();
    assert!(msg.contains("none: there is no *contrail.conf in"), "{msg}");
    assert!(!msg.contains("node-wide file the node-wide file"), "{msg}");
    // The call's line in the (default) log names the pod CNI_ARGS names.
    let log = std::fs::read_to_string("/var/log/contrail/cni/opencontrail.log").unwrap();
    let line = format!("pod={}/{}", fx.pod.namespace, fx.pod.name);
    assert!(
        log.lines()
            .any(|l| l.contains("failed in") && l.contains(&line)),
        "{log}"
    );
}
