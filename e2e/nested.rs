//! Nested mode end to end: the Kubernetes node is a VM of the hypervisor's vRouter, and each pod
//! interface is a macvlan on an 802.1Q sub-interface of the node's NIC (here a dummy link, the
//! parent), with the VMI's tag. This machine's kernel has no 802.1Q: `scripts/test` runs this
//! binary inside a VM with Debian's kernel (`scripts/vm-run`); elsewhere every test fails, saying
//! so. Each test checks that nothing is ever registered with the agent (the simulator records a
//! `POST /vm` or `DELETE /vm` of a nested pod as a violation).

use std::process::{Command, Stdio};
use std::time::Duration;

use contrail_testkit::*;
use serde_json::{Value, json};

/// The node VM's NIC: a dummy link, up, MTU 1500, deleted on drop (its VLANs with it).
struct Parent(String);

impl Parent {
    fn new() -> Parent {
        Parent::named(&format!("ck8sp{}", &tag()[..6]))
    }

    /// In the test's own node: any name is free.
    fn named(name: &str) -> Parent {
        enter_node();
        if let Err(e) = try_sh("ip", &["link", "add", name, "type", "dummy"]) {
            panic!(
                "{e}\nnested mode needs dummy and 802.1Q links, which this kernel lacks: \
                 scripts/test runs e2e/nested.rs in a VM with Debian's kernel (scripts/vm-run)"
            );
        }
        sh("ip", &["link", "set", name, "up"]);
        Parent(name.to_string())
    }
}

impl Drop for Parent {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

/// A VMI of a nested pod: `VmiSpec::new` with a VLAN tag.
fn nested(network: &str, n: u8, tag: u16) -> VmiSpec {
    VmiSpec::new(network, n).with("vlan-id", json!(tag))
}

/// A pod on a nested node: the node-wide file says `vif-type: macvlan` on the parent.
fn node(vmis: Vec<VmiSpec>) -> (Fixture, Parent) {
    node_with(PodSpec::new(vmis), &[])
}

/// [`node`] for `pod`, with simulator switches.
fn node_with(pod: PodSpec, sim_args: &[&str]) -> (Fixture, Parent) {
    let parent = Parent::new();
    let mut fx = Fixture::with_pod(pod, sim_args);
    fx.set("vif-type", json!("macvlan"))
        .set("parent-interface", json!(parent.0));
    (fx, parent)
}

/// `ip -d -j link show` of one link, in the pod (`netns`) or on the node.
fn details(netns: Option<&Netns>, name: &str) -> Option<Value> {
    let mut args = vec![];
    if let Some(ns) = netns {
        args.extend(["-n", ns.name.as_str()]);
    }
    args.extend(["-d", "-j", "link", "show", name]);
    let out = try_sh("ip", &args).ok()?;
    serde_json::from_str::<Value>(&out).ok()?.get(0).cloned()
}

/// The node's VLAN links on `parent`, as (name, tag).
fn vlans(parent: &Parent) -> Vec<(String, u64)> {
    let links: Vec<Value> =
        serde_json::from_str(&sh("ip", &["-d", "-j", "link", "show", "type", "vlan"])).unwrap();
    let mut v: Vec<(String, u64)> = links
        .iter()
        .filter(|l| l["link"] == parent.0.as_str())
        .map(|l| {
            let tag = l["linkinfo"]["info_data"]["id"].as_u64().unwrap();
            (l["ifname"].as_str().unwrap().to_string(), tag)
        })
        .collect();
    v.sort();
    v
}

/// The VLAN link name the manual documents (docs/nested-mode.md): `cvl` + the same 12 hex digits as a veth's `tap`.
fn vlan_name(vmi: &VmiSpec) -> String {
    format!("cvl{}", &host_ifname(&vmi.uuid)[3..])
}

/// Nothing registered, nothing deregistered: the agent never heard from this node.
#[track_caller]
fn never_registered(fx: &Fixture) {
    assert_eq!(fx.sim.violations(), [] as [Value; 0]);
    assert_eq!(fx.sim.ports(), []);
}

/// Nothing of the pod on the node: no VLAN link on the parent, no state.
#[track_caller]
fn nothing_left(fx: &Fixture, parent: &Parent) {
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    assert_eq!(vlans(parent), []);
    assert!(!fx.node.pod_dir_exists(&fx.pod), "state left");
    assert_eq!(fx.node.leftovers(), [] as [String; 0]);
    never_registered(fx);
}

#[test]
fn a_multus_pod_with_a_repeated_dual_stack_network_gets_macvlans_on_its_vlans() {
    let vmis = vec![
        nested("default", 1, 10).dual_stack(),
        nested("net-a", 2, 11)
            .dual_stack()
            .with("default-gw", json!(true)),
        nested("net-a", 3, 12).dual_stack(),
    ];
    let (mut fx, parent) = node(vmis.clone());
    fx.set("mtu", json!(1400));
    let results = [
        fx.add("eth0", "contrail-k8s-cni"),
        fx.add("net1", "net-a"),
        fx.add("net2", "net-a"),
    ];
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo", "net1", "net2"]);
    let mut want_vlans = Vec::new();
    for ((ifname, v), r) in ["eth0", "net1", "net2"].iter().zip(&vmis).zip(&results) {
        let link = details(Some(&fx.ns), ifname).unwrap();
        assert_eq!(link["address"], v.mac.as_str(), "{ifname}");
        assert_eq!(link["mtu"], 1400, "{ifname}");
        assert_eq!(link["linkinfo"]["info_kind"], "macvlan", "{ifname}");
        assert_eq!(link["linkinfo"]["info_data"]["mode"], "vepa", "{ifname}");
        let n = &v.addr().split('.').nth(1).unwrap().to_string();
        let want = vec![v.addr(), format!("fd00:{n}::{n}a/128")];
        assert_eq!(fx.ns.addrs(ifname), want, "{ifname}");
        // The result names the VLAN link as the host side.
        assert_eq!(host_name(r), vlan_name(v), "{ifname}");
        let vlan = details(None, &vlan_name(v)).unwrap();
        assert_eq!(vlan["mtu"], 1400);
        assert!(vlan["flags"].as_array().unwrap().contains(&json!("UP")));
        let tag = v.extra["vlan-id"].as_u64().unwrap();
        want_vlans.push((vlan_name(v), tag));
    }
    want_vlans.sort();
    assert_eq!(vlans(&parent), want_vlans);
    // `inspect` shows each attachment with its VLAN link and tag, healthy.
    let mut shown: Vec<(String, u64)> = fx
        .node
        .inspect()
        .iter()
        .map(|r| {
            assert_eq!(r["health"], "ok", "{r}");
            (
                r["host"].as_str().unwrap().into(),
                r["vlan"].as_u64().unwrap(),
            )
        })
        .collect();
    shown.sort();
    assert_eq!(shown, want_vlans);
    // The default route on the annotated VMI's interface, both families.
    let mut routes = fx.ns.default_routes();
    routes.sort();
    assert_eq!(
        routes,
        [
            ("-4".into(), "10.2.0.1".into(), "net1".into()),
            ("-6".into(), "fd00:2::1".into(), "net1".into())
        ]
    );
    for ((ifname, network), r) in [
        ("eth0", "contrail-k8s-cni"),
        ("net1", "net-a"),
        ("net2", "net-a"),
    ]
    .iter()
    .zip(&results)
    {
        fx.check(ifname, network, r).assert_ok();
    }
    // DEL of one attachment: its VLAN goes, its siblings stay.
    fx.del("net1", "net-a").assert_ok();
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo", "net2"]);
    assert_eq!(vlans(&parent).len(), 2);
    fx.check("net2", "net-a", &results[2]).assert_ok();
    fx.del("net2", "net-a").assert_ok();
    fx.del("eth0", "contrail-k8s-cni").assert_ok();
    nothing_left(&fx, &parent);
}

/// netconf/10-contrail-nested.conf as shipped, on a node VM whose NIC is eth0: kubelet calls
/// the plugin with the node-wide file for the cluster network, Multus with a NAD for net-a.
#[test]
fn the_shipped_nested_netconf_connects_a_pod() {
    let parent = Parent::named("eth0");
    let vmis = vec![nested("default", 1, 90), nested("net-a", 2, 91)];
    let mut fx = Fixture::new(vmis.clone());
    let path = repo_file("netconf/10-contrail-nested.conf");
    let mut shipped: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(shipped["contrail"]["vif-type"], "macvlan");
    // The link-local service's address: here, the simulator's.
    shipped["contrail"]["vrouter-ip"] = json!("127.0.0.1");
    let conf = fx.node.install(shipped);
    let results = [
        fx.call("ADD", "eth0", &conf).assert_ok().json(),
        fx.add("net1", "net-a"),
    ];
    for ((ifname, v), r) in ["eth0", "net1"].iter().zip(&vmis).zip(&results) {
        let link = details(Some(&fx.ns), ifname).unwrap();
        assert_eq!(link["address"], v.mac.as_str(), "{ifname}");
        assert_eq!(link["mtu"], 1450, "{ifname}");
        assert_eq!(fx.ns.addrs(ifname), [v.addr()], "{ifname}");
        assert_eq!(host_name(r), vlan_name(v), "{ifname}");
    }
    let mut want = vec![(vlan_name(&vmis[0]), 90), (vlan_name(&vmis[1]), 91)];
    want.sort();
    assert_eq!(vlans(&parent), want);
    let mut check = conf.clone();
    check["prevResult"] = results[0].clone();
    fx.call("CHECK", "eth0", &check).assert_ok();
    fx.call("DEL", "eth0", &conf).assert_ok();
    fx.del("net1", "net-a").assert_ok();
    nothing_left(&fx, &parent);
}

#[test]
fn check_finds_a_deleted_or_retagged_vlan_link() {
    let vmi = nested("default", 1, 20);
    let (mut fx, parent) = node(vec![vmi.clone()]);
    let r = fx.add("eth0", "default");
    fx.check("eth0", "default", &r).assert_ok();
    let name = vlan_name(&vmi);
    sh("ip", &["link", "del", &name]);
    let out = fx.check("eth0", "default", &r);
    assert_eq!(out.code(), 103);
    // The macvlan went with its VLAN link.
    assert!(
        out.msg().contains("interface eth0 is missing"),
        "{}",
        out.msg()
    );
    fx.del("eth0", "default").assert_ok();
    // Again, and then Contrail gives the VMI another tag: the vRouter now expects frames
    // tagged 21, the pod's still leave tagged 20.
    let r = fx.add("eth0", "default");
    assert_eq!(vlans(&parent), [(name.clone(), 20)]);
    fx.change_vmis(|v| v[0].extra["vlan-id"] = json!(21));
    let out = fx.check("eth0", "default", &r);
    assert_eq!(out.code(), 103, "{}", out.stdout);
    assert!(
        out.msg()
            .contains(&format!("VLAN link {name} has tag 20, the agent says 21")),
        "{}",
        out.msg()
    );
    fx.del("eth0", "default").assert_ok();
    nothing_left(&fx, &parent);
}

#[test]
fn del_with_the_netns_gone_removes_the_vlan() {
    let vmi = nested("default", 1, 30);
    let (fx, parent) = node(vec![vmi.clone()]);
    fx.add("eth0", "default");
    assert_eq!(vlans(&parent), [(vlan_name(&vmi), 30)]);
    fx.remove_netns();
    fx.del("eth0", "default").assert_ok();
    assert_eq!(vlans(&parent), []);
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    never_registered(&fx);
}

#[test]
fn a_new_sandbox_takes_over_the_vlan_of_one_whose_del_never_came() {
    let vmi = nested("default", 1, 40);
    let (fx, parent) = node(vec![vmi.clone()]);
    fx.add("eth0", "default");
    // The sandbox is replaced without a DEL (a lost Multus cache); its netns is gone, its VLAN
    // link is still on the node.
    fx.remove_netns();
    let (new_cid, new_ns) = (uuid(), Netns::new());
    let conf = fx.conf("default");
    fx.call_in(&new_cid, &new_ns.path(), "ADD", "eth0", &conf)
        .assert_ok();
    assert_eq!(new_ns.mac("eth0"), vmi.mac);
    assert_eq!(vlans(&parent), [(vlan_name(&vmi), 40)]);
    // The old sandbox's late DEL leaves the new one alone.
    fx.del("eth0", "default").assert_ok();
    assert_eq!(new_ns.mac("eth0"), vmi.mac);
    fx.call_in(&new_cid, &new_ns.path(), "CHECK", "eth0", &conf)
        .assert_ok();
    fx.call_in(&new_cid, &new_ns.path(), "DEL", "eth0", &conf)
        .assert_ok();
    assert_eq!(vlans(&parent), []);
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    never_registered(&fx);
}

#[test]
fn a_vlan_link_with_the_tag_that_is_not_ours_is_refused_and_named() {
    let vmi = nested("default", 1, 77);
    let (fx, parent) = node(vec![vmi]);
    let theirs = format!("ck8sv{}", &tag()[..6]);
    sh(
        "ip",
        &[
            "link", "add", "link", &parent.0, "name", &theirs, "type", "vlan", "id", "77",
        ],
    );
    let out = fx.call("ADD", "eth0", &fx.conf("default"));
    assert_eq!(out.code(), 102, "{}", out.stdout);
    assert!(out.msg().contains(&theirs), "{}", out.msg());
    assert_eq!(
        vlans(&parent),
        [(theirs.clone(), 77)],
        "theirs is untouched"
    );
    fx.del("eth0", "default").assert_ok();
    sh("ip", &["link", "del", &theirs]);
    nothing_left(&fx, &parent);
}

#[test]
fn a_missing_or_down_parent_and_an_mtu_above_the_parents_fail_before_anything() {
    let (mut fx, parent) = node(vec![nested("default", 1, 50)]);
    let cases: [(&str, Value, u64, &str); 3] = [
        (
            "parent-interface",
            json!("ck8snone"),
            102,
            "ck8snone of nested mode is not on this node",
        ),
        (
            "mtu",
            json!(9000),
            7,
            "more than the 1500 of parent interface",
        ),
        ("parent-interface", json!(parent.0), 102, "is down"),
    ];
    for (key, value, code, words) in cases {
        if words == "is down" {
            sh("ip", &["link", "set", &parent.0, "down"]);
        }
        fx.set(key, value.clone());
        let out = fx.call("ADD", "eth0", &fx.conf("default"));
        assert_eq!(out.code(), code, "{key}={value}: {}", out.stdout);
        assert!(out.msg().contains(words), "{key}={value}: {}", out.msg());
        assert!(
            !fx.node.pod_dir_exists(&fx.pod),
            "{key}={value}: state written"
        );
        assert_eq!(fx.sim.requests(), 0, "{key}={value}: the agent was asked");
        fx.del("eth0", "default").assert_ok();
        fx.set("parent-interface", json!(parent.0));
        fx.set("mtu", Value::Null);
    }
    nothing_left(&fx, &parent);
}

#[test]
fn tags_outside_1_to_4094_are_refused_before_anything() {
    for tag in [0u16, 4095, 65535] {
        let (fx, parent) = node(vec![nested("default", 1, tag)]);
        let out = fx.call("ADD", "eth0", &fx.conf("default"));
        assert_eq!(out.code(), 6, "{tag}: {}", out.stdout);
        assert!(
            out.msg().contains("vlan-id is not a VLAN tag"),
            "{tag}: {}",
            out.msg()
        );
        assert!(!fx.node.pod_dir_exists(&fx.pod), "{tag}: state written");
        fx.del("eth0", "default").assert_ok();
        nothing_left(&fx, &parent);
    }
}

#[test]
fn gc_and_the_sweep_release_a_gone_sandboxs_vlan() {
    let vmis = vec![nested("default", 1, 60), nested("net-a", 2, 61)];
    let (fx, parent) = node(vmis);
    fx.add("eth0", "default");
    fx.add("net1", "net-a");
    fx.remove_netns();
    // GC: the sandbox is not among the valid attachments.
    fx.node.gc(json!([])).assert_ok();
    assert_eq!(vlans(&parent), []);
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    // The sweep of `install --watch`: a sandbox whose netns is gone.
    let ns = Netns::new();
    let cid = uuid();
    let conf = fx.conf("default");
    fx.call_in(&cid, &ns.path(), "ADD", "eth0", &conf)
        .assert_ok();
    drop(ns);
    let host = TempDir::new();
    let mut watch = Command::new(plugin_bin())
        .args([
            "install",
            "--watch",
            "--sweep-interval",
            "1",
            "--sweep-grace",
            "0",
        ])
        .arg("--bin-dir")
        .arg(host.0.join("bin"))
        .arg("--conf-dir")
        .arg(host.0.join("net.d"))
        .arg("--conf")
        .arg(fx.node.node_file())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The sweep removes the links, then the state: wait for both.
    wait_for("the sweep", Duration::from_secs(60), || {
        vlans(&parent).is_empty() && !fx.node.pod_dir_exists(&fx.pod)
    });
    let _ = watch.kill();
    let _ = watch.wait();
    never_registered(&fx);
}

#[cfg(feature = "thick")]
#[test]
fn a_thick_pod_on_a_nested_node() {
    let vmis = vec![
        nested("default", 1, 70).dual_stack(),
        nested("net-a", 2, 71),
        nested("net-b", 3, 72),
    ];
    let (mut fx, parent) = node(vmis.clone());
    fx.set("mode", json!("thick"));
    let args = format!(
        "K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
        fx.pod.namespace, fx.pod.name
    );
    let conf = fx.conf("default");
    let call = |cmd: &str| {
        fx.node
            .cni(cmd)
            .container(&fx.cid)
            .netns(&fx.ns.path())
            .ifname("eth0")
            .args(&args)
            .run(&conf)
    };
    call("ADD").assert_ok();
    for (i, v) in vmis.iter().enumerate() {
        assert_eq!(fx.ns.mac(&format!("eth{i}")), v.mac);
    }
    assert_eq!(vlans(&parent).len(), 3);
    call("CHECK").assert_ok();
    call("DEL").assert_ok();
    nothing_left(&fx, &parent);
}

/// A thick ADD whose second VMI has no usable tag records none of the pod's attachments: every
/// record is made (and refused) before the first is written.
#[cfg(feature = "thick")]
#[test]
fn a_thick_pod_with_one_untagged_vmi_writes_nothing() {
    let (mut fx, parent) = node(vec![nested("default", 1, 73), nested("net-a", 2, 0)]);
    fx.set("mode", json!("thick"));
    let args = format!(
        "K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
        fx.pod.namespace, fx.pod.name
    );
    let conf = fx.conf("default");
    let out = fx
        .node
        .cni("ADD")
        .container(&fx.cid)
        .netns(&fx.ns.path())
        .ifname("eth0")
        .args(&args)
        .run(&conf);
    assert_eq!(out.code(), 6, "{}", out.stdout);
    assert!(
        out.msg().contains("vlan-id is not a VLAN tag"),
        "{}",
        out.msg()
    );
    assert!(!fx.node.pod_dir_exists(&fx.pod), "a record was written");
    nothing_left(&fx, &parent);
}

/// SIGKILL at each step of ADD and DEL that nested mode has, then a DEL: nothing is left, and
/// the ADD works again.
#[cfg(feature = "crash-points")]
#[test]
fn killed_at_each_step_then_del_leaves_nothing() {
    // A first "not yet" for the IP configuration, so that the wait has a step to die at
    // however late a busy machine (or the VM) makes the first poll: "waiting" goes first.
    let pod = PodSpec::new(vec![nested("default", 1, 80)]);
    let not_yet = format!("GET:/vm/{}/{}:1", pod.uuid, pod.vmis[0].uuid);
    let (fx, parent) = node_with(pod, &["--not-yet", &not_yet]);
    let conf = fx.conf("default");
    let killed = |command: &str, step: &str| {
        let out = fx
            .node
            .cni(command)
            .container(&fx.cid)
            .netns(&fx.ns.path())
            .ifname("eth0")
            .args(&fx.args())
            .env("CONTRAIL_CNI_CRASH_AT", step)
            .run(&conf);
        assert!(
            !out.ok && out.stdout.is_empty(),
            "{command} {step}: not killed: {out:?}"
        );
    };
    for step in [
        "waiting",
        "locked",
        "renaming",
        "claimed",
        "veth",
        "registered",
        "ip",
        "addressed",
    ] {
        killed("ADD", step);
        fx.del("eth0", "default").assert_ok();
        nothing_left(&fx, &parent);
    }
    fx.add("eth0", "default");
    killed("DEL", "unlinked");
    fx.del("eth0", "default").assert_ok();
    nothing_left(&fx, &parent);
}

/// The OpenSDN Go plugin's attachments on a nested node (`contrail_testkit::legacy`): its VLAN
/// links are `vlan` + 11 characters of `<ifname>-<pod uuid>`, its files name the node's parent
/// interface as `host-ifname`, and nothing is registered. This plugin's DEL, GC and the sweep
/// release them by their VLAN links, never the parent; a new sandbox takes them over.
#[test]
fn the_go_plugins_nested_attachments_are_released_by_their_vlans_never_the_parent() {
    use contrail_testkit::legacy::{Legacy, link_name};
    let vmis = vec![nested("default", 1, 70), nested("net-a", 2, 71)];
    let (mut fx, parent) = node(vmis);
    let legacy = |fx: &Fixture| {
        let attach = Legacy {
            node: &fx.node,
            sim: &fx.sim,
            parent: Some(parent.0.clone()),
        };
        attach.add(&fx.pod, &fx.cid, &fx.ns, "eth0", "contrail-k8s-cni");
        attach.add(&fx.pod, &fx.cid, &fx.ns, "net1", "net-a");
    };
    let links = |fx: &Fixture| {
        let mut v: Vec<String> = vlans(&parent).into_iter().map(|(n, _)| n).collect();
        v.sort();
        let mut want = vec![
            link_name(true, "eth0", &fx.pod.uuid),
            link_name(true, "net1", &fx.pod.uuid),
        ];
        want.sort();
        (v, want)
    };
    // Its DEL: the VLAN link goes (the macvlan with it), the parent stays.
    legacy(&fx);
    let (have, want) = links(&fx);
    assert_eq!(have, want);
    let file = fx.node.ports_dir().join(fx.pod.vm_name());
    let text: String = std::fs::read_dir(&file)
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap())
        .collect();
    assert!(
        text.contains(&format!("\"host-ifname\": \"{}\"", parent.0)),
        "{text}"
    );
    fx.call("CHECK", "net1", &fx.conf("net-a")).assert_ok();
    fx.del("net1", "net-a").assert_ok();
    fx.del("eth0", "default").assert_ok();
    assert!(
        host_link_exists(&parent.0),
        "the node's parent interface was deleted"
    );
    nothing_left(&fx, &parent);
    // GC after its sandbox went without a DEL: its VLAN links outlive the namespace.
    legacy(&fx);
    fx.remove_netns();
    fx.node.gc(json!([])).assert_ok();
    assert!(host_link_exists(&parent.0));
    assert_eq!(vlans(&parent), []);
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    // A new sandbox of the pod from this plugin takes its VMIs over, and its VLAN links (the
    // kernel allows one per tag and parent) are replaced by this plugin's.
    fx.ns = Netns::new();
    legacy(&fx);
    fx.cid = uuid();
    fx.ns = Netns::new();
    fx.add("eth0", "default");
    fx.add("net1", "net-a");
    let (have, _) = links(&fx);
    assert!(have.iter().all(|n| n.starts_with("cvl")), "{have:?}");
    fx.del("net1", "net-a").assert_ok();
    fx.del("eth0", "default").assert_ok();
    assert!(host_link_exists(&parent.0));
    nothing_left(&fx, &parent);
}
