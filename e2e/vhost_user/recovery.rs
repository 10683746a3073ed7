//! What releases or recovers a vhost-user attachment: GC with a killed application's socket and
//! the sweep; a DEL while the application listens; SIGKILL at every step of ADD and DEL (in the
//! `crash-points` build); an agent restart that must keep the port a PMD one; `inspect` of the
//! link, its loss and orphan links; an ADD that fails after `POST /port`.

use contrail_testkit::*;
use serde_json::{Value, json};

#[cfg(feature = "crash-points")]
use super::is_link;
use super::{BOUND, Dpdk, is_socket, requests_by_route, sorted, sweeper};

#[test]
fn gc_and_the_sweep_leave_no_link_directory_or_port_registration() {
    // GC (CNI 1.1) of a sandbox that is gone, whose application was killed and left its
    // socket behind.
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    d.add("net1", "dpdk-net");
    let socket = d.pod_dir().join("net1.sock");
    let app = Testpmd::app(&d.pod_dir(), "net1.sock", &[&d.vrouter.0, &d.vhost.0]);
    wait_for("the application's socket", BOUND, || is_socket(&socket));
    drop(app); // SIGKILL
    assert!(is_socket(&socket));
    d.fx.remove_netns();
    d.fx.node.gc(json!([])).assert_ok();
    d.assert_node_clean();

    // The sweep (install --watch) of a sandbox whose netns is gone.
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    d.add("net1", "dpdk-net");
    d.fx.remove_netns();
    let (_host, watch) = sweeper(&d);
    wait_for("the sweep", BOUND, || {
        watch.log().contains("sweep released 1 attachment(s)")
    });
    watch.terminate();
    d.assert_node_clean();
}

/// A DEL that comes while the application still listens (not the kubelet's order, but a
/// runtime's or an operator's): the socket goes with the port, and the pod's directory with it;
/// the application is not disturbed (nothing connects to it to find out whether it listens).
#[test]
fn a_del_while_the_application_listens_removes_its_socket_and_directory() {
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], false);
    d.add("net1", "dpdk-net");
    let socket = d.pod_dir().join("net1.sock");
    let app = Testpmd::app(&d.pod_dir(), "net1.sock", &[&d.vrouter.0, &d.vhost.0]);
    wait_for("the application's socket", BOUND, || is_socket(&socket));
    d.del("net1", "dpdk-net");
    d.assert_nothing_left();
    let out = app.stop(BOUND);
    assert!(
        !out.contains("Connected") && !out.contains("new device"),
        "{out}"
    );
}

/// SIGKILL at every step of a vhost-user attachment's ADD and DEL, beside a veth sibling that
/// is up: the runtime's DEL (or a retried ADD) finishes the job, the sibling keeps its
/// registration, and in the end nothing is left.
#[cfg(feature = "crash-points")]
#[test]
fn killed_at_every_step_then_del_or_a_retry_finishes_the_job() {
    let killed = |d: &Dpdk, command: &str, step: &str| {
        let fx = &d.fx;
        let out = fx
            .node
            .cni(command)
            .container(&fx.cid)
            .netns(&fx.ns.path())
            .ifname("net1")
            .args(&fx.args())
            .env("CONTRAIL_CNI_CRASH_AT", step)
            .run(&d.conf("dpdk-net"));
        assert!(
            !out.ok && out.stdout.is_empty(),
            "{command} {step}: not killed: {out:?}"
        );
    };
    let sibling_only = |d: &Dpdk, step: &str| {
        assert_eq!(d.fx.ns.ifnames(), ["eth0", "lo"], "{step}");
        assert_eq!(d.links(), [] as [String; 0], "{step}: link left");
        assert!(!d.pod_dir().exists(), "{step}: directory left");
        assert_eq!(
            d.fx.node.state_files(&d.fx.pod),
            [d.fx.pod.vmis[0].uuid.clone()],
            "{step}"
        );
        d.fx.assert_registrations_follow_files();
        d.fx.call("CHECK", "eth0", &d.fx.conf("default"))
            .assert_ok();
    };
    let pod = || {
        // The first poll for net1's IP configuration is answered "not yet": a wait to be
        // killed in, however late a busy machine makes that poll.
        let pod = PodSpec::new(vec![
            VmiSpec::new("default", 1),
            VmiSpec::new("dpdk-net", 2),
        ]);
        let not_yet = format!("GET:/vm/{}/{}:1", pod.uuid, pod.vmis[1].uuid);
        let d = Dpdk::with_sim(pod, true, &["--not-yet", &not_yet]);
        d.fx.add("eth0", "default");
        d
    };
    let finish = |d: &Dpdk| {
        d.fx.del("eth0", "default").assert_ok();
        d.del("net1", "dpdk-net");
        d.assert_nothing_left();
        assert_eq!(d.fx.node.leftovers(), [] as [String; 0]);
    };
    let add_steps = ADD_STEPS.iter().chain(&["vhost-dir"]);
    for step in add_steps.clone() {
        let d = pod();
        killed(&d, "ADD", step);
        d.del("net1", "dpdk-net");
        sibling_only(&d, step);
        finish(&d);
    }
    for step in add_steps {
        let d = pod();
        killed(&d, "ADD", step);
        let r = d.add("net1", "dpdk-net");
        assert_eq!(
            r["interfaces"][0]["mac"],
            d.fx.pod.vmis[1].mac.as_str(),
            "{step}"
        );
        assert!(is_link(&d.link(1)), "{step}");
        d.fx.assert_registrations_follow_files();
        d.check_ok("net1", &r);
        finish(&d);
    }
    for step in DEL_STEPS {
        let d = pod();
        d.add("net1", "dpdk-net");
        killed(&d, "DEL", step);
        d.del("net1", "dpdk-net");
        sibling_only(&d, step);
        finish(&d);
    }
}

/// The agent restarts on a DPDK node: it reloads its own copy of each `POST /port` and every
/// UUID-named file of the state directory as a `POST /vm` port, without looking for an
/// interface. A vhost-user attachment's file must not be one it can take: the VMI stays a PMD
/// port, registered once, and vrouter-dpdk connects to its link again.
#[test]
fn an_agent_restart_keeps_a_vhost_user_port_a_pmd_port() {
    let agents_ports = TempDir::new();
    let ports_arg = ["--ports-dir", agents_ports.0.to_str().unwrap()];
    let vmis = vec![VmiSpec::new("dpdk-net", 1), VmiSpec::new("net-a", 2)];
    let mut d = Dpdk::with_sim(PodSpec::new(vmis.clone()), true, &ports_arg);
    let r1 = d.add("net1", "dpdk-net");
    d.fx.add("net2", "net-a");
    let state_dir = d.fx.node.ports_dir();
    let mut args: Vec<&str> = d.sim_args.iter().map(String::as_str).collect();
    args.extend(["--state-dir", state_dir.to_str().unwrap()]);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    d.fx.restart_agent(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(d.fx.sim.violations(), [] as [Value; 0]);
    assert_eq!(
        d.routes(),
        sorted(vec![
            (vmis[0].uuid.clone(), "POST /port".into(), "pmd".into()),
            (vmis[1].uuid.clone(), "POST /vm".into(), "af-packet".into()),
        ])
    );
    assert_eq!(
        d.fx.sim.get("/sim/vhost")[0]["path"],
        d.link(0).to_str().unwrap()
    );
    d.check_ok("net1", &r1);
    d.fx.call("CHECK", "net2", &d.fx.conf("net-a")).assert_ok();
    d.fx.del("net2", "net-a").assert_ok();
    d.del("net1", "dpdk-net");
    d.assert_nothing_left();
    let left: Vec<_> = std::fs::read_dir(&agents_ports.0).unwrap().collect();
    assert!(left.is_empty(), "the agent's /port files left: {left:?}");
}

/// `inspect` shows a vhost-user attachment by its link, says when the link is gone, and finds
/// a `uvh_vif_` link into the pods' directories that no attachment explains.
#[test]
fn inspect_shows_the_link_its_loss_and_orphan_links() {
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    d.add("net1", "dpdk-net");
    let vmi = &d.fx.pod.vmis[0];
    let row = |rows: &[Value]| {
        rows.iter()
            .find(|r| r["vmi"] == vmi.uuid.as_str())
            .cloned()
            .unwrap()
    };
    let link_name = d.link(0).file_name().unwrap().to_str().unwrap().to_string();
    let r = row(&d.fx.node.inspect());
    assert_eq!(
        (&r["host"], &r["mac"], &r["health"]),
        (&json!(link_name), &json!(vmi.mac), &json!("ok")),
        "{r}"
    );
    assert_eq!(r["addresses"], json!([vmi.addr()]));
    // Someone removed the link: vrouter-dpdk can no longer reach the pod.
    std::fs::remove_file(d.link(0)).unwrap();
    assert_eq!(
        row(&d.fx.node.inspect())["health"],
        "vhost-user link missing"
    );
    let out = d.fx.call("CHECK", "net1", &d.conf("dpdk-net"));
    assert_eq!(out.code(), 103, "{out:?}");
    // A link of this plugin's kind that no attachment explains.
    let orphan = d.vrouter.0.join("uvh_vif_tap0123456789a");
    std::os::unix::fs::symlink(d.vhost.0.join("pods/gone/net1.sock"), &orphan).unwrap();
    let rows = d.fx.node.inspect();
    let o = rows
        .iter()
        .find(|r| r["host"] == "uvh_vif_tap0123456789a")
        .unwrap();
    assert_eq!(o["health"], "orphan vhost-user link");
    assert_eq!(
        o["fix"],
        format!("if no pod uses it: rm {}", orphan.display())
    );
    std::fs::remove_file(&orphan).unwrap();
    d.del("net1", "dpdk-net");
    d.assert_nothing_left();
}

/// An ADD that fails after its `POST /port` (the VMI never gets its IP configuration) undoes
/// it: no link, no directory, no JSON file, no registration by either route; the VMI stays
/// reserved for the retry, which fails the same way, and the runtime's DEL leaves nothing.
#[test]
fn an_add_that_fails_after_its_registration_leaves_nothing() {
    let vmis = vec![VmiSpec::new("dpdk-net", 1).with("ip-delay-ms", json!(600_000))];
    let mut d = Dpdk::new(vmis, true);
    for _ in 0..2 {
        let conf = d.conf("dpdk-net");
        let out = d.fx.under((0.1, 3), |fx| fx.call("ADD", "net1", &conf));
        assert_eq!(out.code(), 11, "{out:?}");
        assert!(out.msg().contains(&d.fx.pod.vmis[0].uuid), "{}", out.msg());
        let by = requests_by_route(&d);
        assert!(by.contains_key("POST /port"), "never registered: {by:?}");
        d.fx.assert_rolled_back();
        assert_eq!(d.links(), [] as [String; 0]);
        assert!(!d.pod_dir().exists());
        assert_eq!(
            d.fx.node.reservations(&d.fx.pod),
            [d.fx.pod.vmis[0].uuid.clone()]
        );
    }
    d.del("net1", "dpdk-net");
    d.assert_nothing_left();
}
