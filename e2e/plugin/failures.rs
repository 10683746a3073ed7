//! Plugin mode's failures: a failed registration, an interface name that exists, an agent that
//! never gives an IP or a whole pod, an unknown network, an unreachable agent, bad config and
//! environment (refused before anything is created), ADDs that fail after their registration
//! (nothing left, the sibling works, the VMI kept for the retry until its DEL), and CHECK
//! against a prevResult that lists what the pod lacks.

use contrail_testkit::*;
use serde_json::{Value, json};

#[test]
fn failed_registration_rolls_everything_back() {
    let mut fx = Fixture::with_sim(
        vec![VmiSpec::new("default", 1)],
        &["--fail", "POST:/vm:500"],
    );
    fx.set("poll-timeout", json!(0.1))
        .set("poll-retries", json!(3));
    let out = fx.call("ADD", "eth0", &fx.conf(""));
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("HTTP 500"), "{}", out.msg());
    fx.assert_rolled_back();
    assert_eq!(fx.node.reservations(&fx.pod), [fx.pod.vmis[0].uuid.clone()]);
    // Multus then sends DEL to the failed delegate: it succeeds, and nothing is left.
    fx.del("eth0", "").assert_ok();
    fx.assert_nothing_left();
}

#[test]
fn existing_interface_name_fails_and_is_left_untouched() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let peer = format!("ck8s{}", tag());
    sh(
        "ip",
        &[
            "link",
            "add",
            &peer,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &fx.ns.name,
        ],
    );
    let mac = fx.ns.mac("eth0");
    let out = fx.call("ADD", "eth0", &fx.conf(""));
    assert_eq!(out.code(), 102);
    assert!(out.msg().contains("already exists"), "{}", out.msg());
    assert_eq!(fx.ns.mac("eth0"), mac);
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    assert!(fx.sim.ports().is_empty());
    sh("ip", &["link", "del", &peer]);
}

#[test]
fn agent_that_never_gives_an_ip_times_out_with_code_11() {
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1).with("ip-delay-ms", json!(600_000)),
    ]);
    let started = std::time::Instant::now();
    let out = fx.under((0.1, 5), |fx| fx.call("ADD", "eth0", &fx.conf("")));
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("IP address"), "{}", out.msg());
    // Bounded by poll-timeout x poll-retries (0.5 s), with slack for process start.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    fx.assert_rolled_back();
    fx.del("eth0", "").assert_ok();
    fx.assert_nothing_left();
}

#[test]
fn incomplete_pod_times_out_saying_how_far_it_got() {
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("cfg-delay-ms", json!(600_000)),
    ]);
    fx.set("poll-timeout", json!(0.1))
        .set("poll-retries", json!(3));
    let out = fx.call("ADD", "eth0", &fx.conf(""));
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("1 of 2 interfaces"), "{}", out.msg());
    fx.assert_nothing_left();
}

#[test]
fn unknown_network_names_the_pod_and_known_networks() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let out = fx.call("ADD", "net1", &fx.conf("net-z"));
    assert_eq!(out.code(), 101);
    let msg = out.msg();
    assert!(
        msg.contains("net-z") && msg.contains(&fx.pod.vm_name()) && msg.contains("default, net-a"),
        "{msg}"
    );
    // A network attached more often than the pod references it.
    fx.add("net1", "net-a");
    let out = fx.call("ADD", "net2", &fx.conf("net-a"));
    assert_eq!(out.code(), 101);
    assert_eq!(fx.ns.ifnames(), ["lo", "net1"]);
    fx.del("net1", "net-a").assert_ok();
}

#[test]
fn unreachable_agent_fails_with_code_11() {
    let mut fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    fx.stop_agent(); // nothing listens on that port any more
    fx.set("poll-timeout", json!(0.1))
        .set("poll-retries", json!(3));
    let out = fx.call("ADD", "eth0", &fx.conf(""));
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("did not answer"), "{}", out.msg());
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    assert!(!fx.node.pod_dir_exists(&fx.pod));
}

#[test]
fn bad_config_and_env_fail_before_anything_is_created() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let args = fx.args();
    let good = fx.conf("");
    let with = |key: &str, v: Value| {
        let mut c = good.clone();
        c["contrail"][key] = v;
        c.to_string()
    };
    let bad_netns = format!("/run/netns/absent-{}", tag());
    // (what, env overrides, stdin, code, words the message must contain)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, u64, &'a str);
    let cases: Vec<Case> = vec![
        ("bad JSON", vec![], "{\"cniVersion\":".into(), 6, "not JSON"),
        (
            "old version",
            vec![],
            json!({"cniVersion": "0.2.0"}).to_string(),
            1,
            "0.2.0",
        ),
        ("mtu", vec![], with("mtu", json!(10)), 7, "contrail.mtu"),
        (
            "port",
            vec![],
            with("vrouter-port", json!("x")),
            7,
            "contrail.vrouter-port",
        ),
        (
            "config-dir",
            vec![],
            with("config-dir", json!("etc/x")),
            7,
            "contrail.config-dir",
        ),
        (
            "name",
            vec![],
            json!({"cniVersion": "1.0.0", "name": "../x"}).to_string(),
            7,
            "name",
        ),
        (
            "no ifname",
            vec![("CNI_IFNAME", "")],
            good.to_string(),
            4,
            "CNI_IFNAME",
        ),
        (
            "long ifname",
            vec![("CNI_IFNAME", "a-very-long-name0")],
            good.to_string(),
            4,
            "CNI_IFNAME",
        ),
        (
            "bad container",
            vec![("CNI_CONTAINERID", "../../x")],
            good.to_string(),
            4,
            "CNI_CONTAINERID",
        ),
        (
            "no command",
            vec![("CNI_COMMAND", "FROB")],
            good.to_string(),
            4,
            "CNI_COMMAND",
        ),
        (
            "no pod",
            vec![("CNI_ARGS", "IgnoreUnknown=1")],
            good.to_string(),
            4,
            "K8S_POD_NAME",
        ),
        (
            "path pod",
            vec![("CNI_ARGS", "K8S_POD_NAME=../../etc")],
            good.to_string(),
            4,
            "K8S_POD_NAME",
        ),
        (
            "no netns",
            vec![("CNI_NETNS", &bad_netns)],
            good.to_string(),
            4,
            "CNI_NETNS",
        ),
    ];
    for (what, overrides, stdin, code, words) in cases {
        let mut env = vec![
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", fx.cid.as_str()),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", args.as_str()),
            (
                "CONTRAIL_CNI_CONF_DIR",
                fx.node.conf_dir.0.to_str().unwrap(),
            ),
        ];
        let ns_path = fx.ns.path();
        env[2].1 = &ns_path;
        for (k, v) in &overrides {
            env.retain(|(ek, _)| ek != k);
            env.push((k, v));
        }
        let out = run_plugin(&env, stdin.as_bytes());
        assert_eq!(out.code(), code, "{what}: {}", out.stdout);
        assert!(out.msg().contains(words), "{what}: {}", out.msg());
        assert!(!fx.node.ports_dir().exists(), "{what}: state written");
        assert_eq!(fx.ns.ifnames(), ["lo"], "{what}");
    }
    if !cfg!(feature = "thick") {
        let mut fx = fx;
        fx.set("mode", json!("thick"));
        let out = fx.call("ADD", "eth0", &good);
        assert_eq!(out.code(), 7);
        assert!(out.msg().contains("--features thick"), "{}", out.msg());
    }
}

/// ADD of `ifname` that fails after its registration (under `budget`), next to eth0, which is
/// up: nothing of it is left (interface, state, registration) and eth0 stays registered and
/// passes CHECK. A rollback the deadline cut short leaves its deregistration pending, and the
/// next call for the pod (the CHECK) finishes it.
#[track_caller]
fn fails_after_registration(
    fx: &mut Fixture,
    budget: (f64, u32),
    conf: &Value,
    eth0: &Value,
) -> Output {
    let out = fx.under(budget, |fx| fx.call("ADD", "net1", conf));
    assert!(!out.ok, "{out:?}");
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo"]);
    for v in &fx.pod.vmis[1..] {
        assert!(!host_link_exists(&host_ifname(&v.uuid)));
    }
    assert_eq!(fx.node.state_files(&fx.pod), [fx.pod.vmis[0].uuid.clone()]);
    fx.assert_registrations_explained();
    fx.check("eth0", "default", eth0).assert_ok();
    let ports: Vec<String> = fx.sim.ports().into_iter().map(|p| p.2).collect();
    assert_eq!(ports, ["eth0"]);
    out
}

#[test]
fn an_add_that_fails_after_its_registration_leaves_nothing_and_its_sibling_works() {
    // net-a's first VMI never gets its IP configuration; the second is fine.
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("ip-delay-ms", json!(600_000)),
        VmiSpec::new("net-a", 3),
    ]);
    let eth0 = fx.add("eth0", "default");
    let conf = fx.conf("net-a");
    let out = fails_after_registration(&mut fx, (0.1, 3), &conf, &eth0);
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains(&fx.pod.vmis[1].uuid), "{}", out.msg());
    // A retry of the same ADD is for the same VMI again (and fails the same way).
    let out = fails_after_registration(&mut fx, (0.1, 3), &conf, &eth0);
    assert!(out.msg().contains(&fx.pod.vmis[1].uuid), "{}", out.msg());
    // Multus DELs the failed delegate and every earlier one: nothing is left anywhere.
    fx.del("net1", "net-a").assert_ok();
    fx.del("eth0", "default").assert_ok();
    fx.assert_nothing_left();
}

#[test]
fn an_add_whose_addresses_fail_after_registration_leaves_nothing() {
    // An MTU below IPv6's minimum shows only once the agent gives the IPv6 configuration,
    // which it does only after the registration.
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).dual_stack(),
    ]);
    let eth0 = fx.add("eth0", "default");
    let mut conf = fx.conf("net-a");
    conf["contrail"]["mtu"] = json!(1279);
    let out = fails_after_registration(&mut fx, (1.0, 20), &conf, &eth0);
    assert_eq!(out.code(), 7);
    assert!(out.msg().contains("1280"), "{}", out.msg());
    // With the MTU fixed, the retry gets the same VMI and comes up.
    fx.add("net1", "net-a");
    assert_eq!(fx.ns.mac("net1"), fx.pod.vmis[1].mac);
    for (ifname, net) in [("net1", "net-a"), ("eth0", "default")] {
        fx.del(ifname, net).assert_ok();
    }
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    assert!(fx.sim.ports().is_empty());
}

#[test]
fn a_failed_attachment_keeps_its_vmi_from_its_siblings_until_its_del() {
    // A pod on net-a three times; the second VMI's IP configuration does not come (the agent
    // answers 500 for it), so ADD net2 fails and is rolled back.
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
        VmiSpec::new("net-a", 4),
    ];
    let pod = PodSpec::new(vmis.clone());
    let agent_files = TempDir::new();
    let state = agent_files.0.to_str().unwrap().to_string();
    let fail = format!("GET:/vm/{}/{}:500", pod.uuid, vmis[2].uuid);
    let mut fx = Fixture::with_pod(pod, &["--state-dir", &state, "--fail", &fail]);
    fx.add("eth0", "default");
    fx.add("net1", "net-a");
    let tight = (0.1, 3);
    let out = fx.under(tight, |fx| fx.call("ADD", "net2", &fx.conf("net-a")));
    assert_eq!(out.code(), 11, "{}", out.stdout);
    assert!(out.msg().contains(&vmis[2].uuid), "{}", out.msg());
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo", "net1"]);
    assert_eq!(fx.node.reservations(&fx.pod), [vmis[2].uuid.clone()]);
    fx.assert_registrations_explained();
    // A sibling gets its own VMI, not net2's (and its ADD finishes what net2's rollback may
    // have left pending: net2 is not registered)...
    fx.add("net3", "net-a");
    assert_eq!(fx.ns.mac("net3"), vmis[3].mac);
    fx.assert_registrations_follow_files();
    // ...and net2's retry gets net2's, once the agent has its IP configuration.
    fx.restart_agent(&["--state-dir", &state]);
    fx.add("net2", "net-a");
    assert_eq!(fx.ns.mac("net2"), vmis[2].mac);
    assert!(fx.node.reservations(&fx.pod).is_empty());
    // A failure kept again, then its DEL releases it.
    fx.restart_agent(&["--state-dir", &state, "--fail", &fail]);
    fx.del("net2", "net-a").assert_ok();
    let out = fx.under(tight, |fx| fx.call("ADD", "net2", &fx.conf("net-a")));
    assert_eq!(out.code(), 11);
    assert_eq!(fx.node.reservations(&fx.pod), [vmis[2].uuid.clone()]);
    fx.del("net2", "net-a").assert_ok();
    assert!(fx.node.reservations(&fx.pod).is_empty());
    for (ifname, network) in [("net3", "net-a"), ("net1", "net-a"), ("eth0", "default")] {
        fx.del(ifname, network).assert_ok();
    }
    fx.assert_nothing_left();
}

#[test]
fn check_fails_when_prev_result_lists_what_the_pod_lacks() {
    let vmis = vec![VmiSpec::new("default", 1).dual_stack()];
    let mut fx = Fixture::new(vmis.clone());
    fx.set("mtu", json!(1400));
    let conf = fx.node.netconf("1.1.0", "default");
    let r = fx.call("ADD", "eth0", &conf).assert_ok().json();
    let check = |prev: &Value| {
        let mut c = conf.clone();
        c["prevResult"] = prev.clone();
        fx.call("CHECK", "eth0", &c)
    };
    check(&r).assert_ok();
    let edits: [(&str, Value); 5] = [
        ("/interfaces/1/mac", json!("02:00:00:00:00:99")),
        ("/interfaces/1/mtu", json!(1500)),
        ("/interfaces/0/mtu", json!(9000)),
        ("/ips/0/address", json!("10.1.0.99/24")),
        ("/interfaces/1/name", json!("eth9")),
    ];
    for (at, value) in edits {
        let mut prev = r.clone();
        *prev.pointer_mut(at).unwrap() = value.clone();
        let out = check(&prev);
        let wants = if at == "/interfaces/1/name" {
            // An interface the result does not name as ours: another plugin's, not ours to
            // check; the one ADD made is still there as the config says.
            0
        } else {
            103
        };
        if wants == 0 {
            out.assert_ok();
        } else {
            assert_eq!(out.code(), 103, "{at}={value}: {}", out.stdout);
            assert!(
                out.msg().contains("prevResult lists"),
                "{at}: {}",
                out.msg()
            );
        }
    }
    // An address listed for the interface that the pod does not have.
    let mut extra = r.clone();
    extra["ips"]
        .as_array_mut()
        .unwrap()
        .push(json!({"address": "10.1.0.77/24", "interface": 1}));
    assert_eq!(check(&extra).code(), 103);
    // The MTU the config says, on both ends.
    sh(
        "ip",
        &["-n", &fx.ns.name, "link", "set", "eth0", "mtu", "1300"],
    );
    let out = check(&r);
    assert_eq!(out.code(), 103);
    assert!(
        out.msg().contains("has MTU 1300, the config says 1400"),
        "{}",
        out.msg()
    );
    fx.call("DEL", "eth0", &conf).assert_ok();
    fx.assert_nothing_left();
}
