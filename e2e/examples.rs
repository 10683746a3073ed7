//! Every example of this project, proven against the real caller. The example pods of the README,
//! `docs/`, `netconf/` and `examples/`: their networks annotation read by kube-manager (the
//! simulator's model of its reading, `sim/src/kube_manager.rs`) and by the real Multus 4.3 thin
//! (`examples/multus/00-multus.conf`, the pods and NADs served by the Kubernetes API stand-in):
//! every attachment Multus makes gets its VMI. The readings that part ways (a space, `@ifname`, a
//! conflist NAD, the JSON form after a space) fail at once with the plugin's code-101 message
//! inside Multus's error, and Multus's rollback leaves nothing. `examples/multus/` (its pod's
//! interface names and network-status), `examples/cnitool/attach.sh` with the real cnitool 1.3,
//! and Multus's dynamic networks (their controller's calls, one attachment each).
//!
//! Proven where their caller's harness is: `examples/genie/` by the real CNI-Genie
//! (`e2e/genie.rs`), `examples/containerd/` by containerd 2.2.7 (`e2e/cri/conf.rs`),
//! `examples/crio/` by CRI-O 1.36 (`e2e/crio/`), the DPDK pod of `netconf/dpdk.yaml` on a DPDK
//! node (`e2e/vhost_user/attach.rs`).

use std::path::Path;

use contrail_testkit::cluster::Nad;
use contrail_testkit::*;
use serde_json::{Value, json};

/// Every YAML document of the README, `docs/`, `netconf/` and `examples/`: the fenced `yaml`
/// blocks of the Markdown (indented ones too), the YAML files whole. (source, document as JSON)
fn manifests() -> Vec<(String, Value)> {
    let mut md = vec![repo_file("README.md")];
    let mut yaml = Vec::new();
    for dir in ["docs", "netconf", "examples"] {
        walk(
            &repo_file(dir),
            &mut |p| match p.extension().and_then(|x| x.to_str()).unwrap_or("") {
                "md" if dir == "docs" => md.push(p.to_path_buf()),
                "yaml" => yaml.push(p.to_path_buf()),
                _ => {}
            },
        );
    }
    let mut texts = Vec::new();
    for p in md {
        let text = std::fs::read_to_string(&p).unwrap();
        let mut block: Option<(usize, String)> = None;
        for line in text.lines() {
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            match &mut block {
                None if trimmed == "```yaml" => block = Some((indent, String::new())),
                Some((_, body)) if trimmed == "```" => {
                    texts.push((show(&p), std::mem::take(body)));
                    block = None;
                }
                Some((at, body)) => {
                    body.push_str(line.get(*at..).unwrap_or(""));
                    body.push('\n');
                }
                None => {}
            }
        }
    }
    for p in yaml {
        texts.push((show(&p), std::fs::read_to_string(&p).unwrap()));
    }
    let mut docs = Vec::new();
    for (source, text) in texts {
        for d in serde_yaml::Deserializer::from_str(&text) {
            let doc: serde_yaml::Value = serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("{source}: not YAML: {e}"));
            let doc: Value = serde_json::to_value(doc).unwrap();
            if !doc.is_null() {
                docs.push((source.clone(), doc));
            }
        }
    }
    docs
}

fn walk(dir: &Path, each: &mut impl FnMut(&Path)) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, each);
        } else {
            each(&p);
        }
    }
}

fn show(p: &Path) -> String {
    p.strip_prefix(repo_file(""))
        .unwrap_or(p)
        .display()
        .to_string()
}

const ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";

/// A file of `examples/`.
fn example(path: &str) -> String {
    let p = repo_file("examples").join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A node of a Multus cluster with one pod (by its annotation) and the cluster's NADs: the agent
/// and the Kubernetes API serve the same description; Multus thin is installed from
/// `examples/multus/00-multus.conf` (its cluster network's node keys pointed at this test's
/// agent and directories, which the plugin takes as the node's own), and the pod's sandbox.
struct Cluster {
    pod: PodSpec,
    sim: Sim,
    api: KubeApi,
    node: Node,
    _dirs: CniDirs,
    multus: Multus,
    ns: Netns,
    cid: String,
}

impl Cluster {
    fn new(pod: PodSpec, nads: &[Nad]) -> Cluster {
        let sim = Sim::start_cluster(&[&pod], nads, &[]);
        let api = KubeApi::of(&sim);
        let mut node = Node::new(&sim);
        node.roomy();
        let mut conf: Value = serde_json::from_str(&example("multus/00-multus.conf")).unwrap();
        for (k, v) in node.contrail().as_object().unwrap() {
            conf["delegates"][0]["contrail"][k] = v.clone();
        }
        let dirs = CniDirs::new();
        let multus = Multus::thin(&dirs, &api, &node, conf);
        Cluster {
            pod,
            sim,
            api,
            node,
            _dirs: dirs,
            multus,
            ns: Netns::new(),
            cid: uuid(),
        }
    }

    fn annotated(namespace: &str, annotation: &str, nads: &[Nad]) -> Cluster {
        Cluster::new(PodSpec::annotated(namespace, annotation), nads)
    }

    /// How kube-manager read the pod's annotation (`GET /sim/kube-manager`).
    fn kube_manager(&self) -> Value {
        self.sim.get("/sim/kube-manager")[0].clone()
    }

    /// A runtime's call of Multus for the pod's sandbox.
    fn multus(&self, command: &str) -> Output {
        self.multus
            .call(command, &self.pod, &self.cid, &self.ns.path())
    }

    /// Multus's ADD fails with the plugin's refusal (code 101) of `ifname` inside its error
    /// (Multus answers 999 for any delegate's), after rolling the pod back: nothing is left.
    #[track_caller]
    fn refused(&self, ifname: &str) -> String {
        let out = self.multus("ADD");
        assert_eq!(out.code(), 999, "{out:?}");
        let msg = out.msg();
        assert!(
            msg.contains("error adding container to network")
                && msg.contains("docs/multus.md#when-kube-manager-made-no-vmi-for-an-attachment"),
            "{msg}"
        );
        let line = self
            .node
            .log()
            .lines()
            .rfind(|l| l.contains(&format!("ADD container={} ifname={ifname} ", self.cid)))
            .unwrap_or_else(|| panic!("no ADD of {ifname}:\n{}", self.node.log()))
            .to_string();
        assert!(line.contains("(code 101)"), "{line}");
        self.assert_nothing_left();
        msg
    }

    /// Nothing of the pod is left: only `lo` in it, no state, no registration.
    #[track_caller]
    fn assert_nothing_left(&self) {
        assert_eq!(self.ns.ifnames(), ["lo"]);
        assert!(!self.node.pod_dir_exists(&self.pod));
        assert_eq!(self.sim.ports(), []);
    }
}

/// Whether a pod's attachments need a DPDK node (a NAD of `interface-type` vhost-user).
fn on_dpdk(pod: &Value, nads: &[Nad]) -> bool {
    let annotation = pod["metadata"]["annotations"][ANNOTATION]
        .as_str()
        .unwrap_or("");
    nads.iter().any(|n| {
        n.config
            .as_deref()
            .is_some_and(|c| c.contains("vhost-user"))
            && annotation.contains(n.name.as_str())
    })
}

#[test]
fn every_example_pod_gets_a_vmi_for_each_of_multus_attachments() {
    let docs = manifests();
    let nads: Vec<Nad> = docs
        .iter()
        .filter_map(|(_, d)| Nad::from_manifest(d))
        .collect();
    let pods: Vec<(&String, &Value)> = docs
        .iter()
        .filter(|(_, d)| d["kind"] == "Pod" && d["metadata"]["annotations"][ANNOTATION].is_string())
        .map(|(source, d)| (source, d))
        .collect();
    // The README's, docs/install.md's, docs/vhost-user.md's, examples/multus/pod.yaml's and
    // netconf/dpdk.yaml's pods at least.
    assert!(pods.len() >= 5, "{pods:?}");
    let mut through_multus = 0;
    for (source, doc) in pods {
        let annotation = doc["metadata"]["annotations"][ANNOTATION].as_str().unwrap();
        let namespace = doc["metadata"]["namespace"].as_str().unwrap_or("default");
        let c = Cluster::annotated(namespace, annotation, &nads);
        let read = c.kube_manager();
        assert!(
            read["entries"]
                .as_array()
                .is_some_and(|e| e.iter().all(|e| e["kept"] == true)),
            "{source}: kube-manager skips an entry of {annotation:?}: {read}"
        );
        if on_dpdk(doc, &nads) {
            continue;
        }
        // Every attachment Multus makes gets its VMI, in index order: the cluster network's on
        // eth0, then one per entry.
        let out = c.multus("ADD");
        assert!(
            out.ok,
            "{source}: {annotation:?}: {out:?}\n{}",
            c.multus.log()
        );
        let vmis = c.sim.vmis_made(&c.pod);
        assert_eq!(c.sim.ports().len(), vmis.len(), "{source}");
        assert_eq!(
            c.ns.ifnames().len(),
            vmis.len() + 1,
            "{source}: {:?}",
            c.ns.ifnames()
        );
        assert_eq!(c.ns.mac("eth0"), vmis[0].mac, "{source}");
        c.multus("DEL").assert_ok();
        c.assert_nothing_left();
        through_multus += 1;
    }
    assert!(through_multus >= 3, "{through_multus}");
}

#[test]
fn the_multus_example_names_each_interface_and_reports_it() {
    // examples/multus/pod.yaml with its NADs (networks.yaml): net-a twice (net1, net2), a
    // network of another namespace (net3), net-b on the interface the pod names (eth5).
    let docs: Vec<Value> = ["multus/pod.yaml", "multus/networks.yaml"]
        .iter()
        .flat_map(|f| {
            serde_yaml::Deserializer::from_str(&example(f))
                .map(|d| {
                    let doc: serde_yaml::Value = serde::Deserialize::deserialize(d).unwrap();
                    serde_json::to_value(doc).unwrap()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let nads: Vec<Nad> = docs.iter().filter_map(Nad::from_manifest).collect();
    for nad in &nads {
        let conf: Value = serde_json::from_str(nad.config.as_deref().unwrap()).unwrap();
        assert!(
            conf.get("name").is_none(),
            "the example's NADs rely on Multus injecting the name"
        );
    }
    let doc = &docs[0];
    let mut pod = PodSpec::annotated(
        doc["metadata"]["namespace"].as_str().unwrap(),
        doc["metadata"]["annotations"][ANNOTATION].as_str().unwrap(),
    );
    pod.name = doc["metadata"]["name"].as_str().unwrap().to_string();
    let c = Cluster::new(pod, &nads);
    let out = c.multus("ADD");
    assert!(out.ok, "{out:?}\n{}", c.multus.log());
    let vmis = c.sim.vmis_made(&c.pod);
    let expect = [
        ("eth0", 0),
        ("net1", 1),
        ("net2", 2),
        ("net3", 3),
        ("eth5", 4),
    ];
    assert_eq!(
        c.ns.ifnames(),
        ["eth0", "eth5", "lo", "net1", "net2", "net3"]
    );
    for (ifname, i) in expect {
        assert_eq!(
            (c.ns.mac(ifname), c.ns.addrs(ifname)),
            (vmis[i].mac.clone(), vec![vmis[i].addr()]),
            "{ifname}"
        );
    }
    assert_eq!(
        c.ns.default_routes(),
        [("-4".into(), vmis[0].gateway.clone().unwrap(), "eth0".into())]
    );
    let status = c.api.network_status(&c.pod);
    let reported: Vec<(&str, &str)> = status
        .iter()
        .map(|e| (e["interface"].as_str().unwrap(), e["mac"].as_str().unwrap()))
        .collect();
    let want: Vec<(&str, &str)> = expect
        .iter()
        .map(|&(ifname, i)| (ifname, vmis[i].mac.as_str()))
        .collect();
    assert_eq!(reported, want);
    c.multus("DEL").assert_ok();
    c.assert_nothing_left();
}

#[test]
fn what_kube_manager_skips_fails_at_once_saying_why() {
    let mut nads = vec![
        Nad::contrail("default", "net-a"),
        Nad::contrail("default", "net-b"),
    ];
    // A conflist-form NAD: the type is in its plugins, none at the top.
    nads.push(Nad {
        config: Some(
            r#"{"cniVersion": "0.4.0", "plugins": [{"type": "contrail-k8s-cni"}, {"type": "tuning"}]}"#
                .into(),
        ),
        ..Nad::contrail("default", "net-list")
    });
    // A space after the comma: Multus trims, kube-manager does not: one net-a VMI, so net2
    // finds it taken.
    let c = Cluster::annotated("default", "net-a, net-a", &nads);
    let read = c.kube_manager();
    assert_eq!(read["entries"][1]["entry"], " net-a");
    assert_eq!(read["entries"][1]["kept"], false, "{read}");
    let msg = c.refused("net2");
    assert!(msg.contains("`net-a,net-a`"), "{msg}");
    // `@ifname` in the string form: Multus puts net-a on eth5, kube-manager made no VMI for it.
    let c = Cluster::annotated("default", "net-a@eth5,net-b", &nads);
    let msg = c.refused("eth5");
    assert!(msg.contains("`net-a@eth5`"), "{msg}");
    assert!(
        msg.contains(r#"\"interface\": \"eth5\""#) || msg.contains(r#""interface": "eth5""#),
        "{msg}"
    );
    // A refusal makes nothing: until a DEL of it comes (Multus's rollback sent one), inspect
    // shows it from the node's log.
    let conf = json!({"cniVersion": "1.0.0", "name": "net-a", "type": "contrail-k8s-cni"});
    let args = c.pod.multus_args(&c.cid);
    let netns = c.ns.path();
    let direct = c.node.cni("ADD").container(&c.cid).netns(&netns);
    assert_eq!(direct.ifname("eth5").args(&args).run(&conf).code(), 101);
    let rows = c.node.inspect();
    let row = rows
        .iter()
        .find(|r| r["ifname"] == "eth5")
        .unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(row["network"], "net-a");
    assert!(
        row["health"]
            .as_str()
            .unwrap()
            .starts_with("ADD refused at "),
        "{row}"
    );
    assert!(
        row["fix"].as_str().unwrap().contains("docs/multus.md"),
        "{row}"
    );
    // A conflist NAD: Multus runs its plugins, kube-manager made no VMI; the message names it.
    let c = Cluster::annotated("default", "net-list", &nads);
    assert!(c.refused("net1").contains("conflist"));
    // The JSON form after a space: JSON to Multus, the string form to kube-manager (it looks at
    // the first character).
    let c = Cluster::annotated("default", r#" [{"name": "net-a"}]"#, &nads);
    assert_eq!(c.kube_manager()["entries"][0]["kept"], false);
    c.refused("net1");
}

#[test]
fn multus_dynamic_networks_remove_an_attachment_and_cannot_add_one() {
    // Multus's dynamic networks controller (not among the peers) asks Multus thick's daemon to
    // ADD or DEL one attachment of a running pod: its delegate's call, as here.
    let nads = [
        Nad::contrail("default", "net-a"),
        Nad::contrail("default", "net-b"),
    ];
    let c = Cluster::annotated("default", "net-a,net-b", &nads);
    let call = |command: &str, ifname: &str, network: &str| {
        let conf = json!({"cniVersion": "1.0.0", "name": network, "type": "contrail-k8s-cni"});
        let args = c.pod.multus_args(&c.cid);
        c.node
            .cni(command)
            .container(&c.cid)
            .netns(&c.ns.path())
            .ifname(ifname)
            .args(&args)
            .run(&conf)
    };
    c.multus("ADD").assert_ok();
    assert_eq!(c.ns.ifnames(), ["eth0", "lo", "net1", "net2"]);
    let vmis = |c: &Cluster| c.sim.get(&format!("/vm-cfg/{}", c.pod.vm_name()));
    let before = vmis(&c);
    // net-a is removed from the annotation: its DEL. The others stay whole and registered; the
    // VMI stays the pod's (kube-manager deletes VMIs only with the pod).
    call("DEL", "net1", "net-a").assert_ok();
    assert_eq!(c.ns.ifnames(), ["eth0", "lo", "net2"]);
    call("CHECK", "net2", "net-b").assert_ok();
    call("CHECK", "eth0", "contrail-k8s-cni").assert_ok();
    assert_eq!(c.sim.ports().len(), 2);
    assert_eq!(vmis(&c), before);
    // net-a is added back as net3, and net-c for the first time: kube-manager makes no VMI for a
    // running pod. net3 gets net-a's VMI again (it is free); net-c fails at once, leaving
    // nothing.
    call("ADD", "net3", "net-a").assert_ok();
    let started = std::time::Instant::now();
    let out = call("ADD", "net4", "net-c");
    assert_eq!(out.code(), 101, "{out:?}");
    assert!(
        out.msg().contains("added to the pod after it started"),
        "{}",
        out.msg()
    );
    // At once: the pod is whole, nothing to wait for (its deadline is 30 s).
    assert!(started.elapsed() < std::time::Duration::from_secs(25));
    assert_eq!(c.ns.ifnames(), ["eth0", "lo", "net2", "net3"]);
    assert_eq!(c.node.state_files(&c.pod).len(), 3);
    assert!(c.node.reservations(&c.pod).is_empty());
    for (ifname, network) in [
        ("net3", "net-a"),
        ("net2", "net-b"),
        ("eth0", "contrail-k8s-cni"),
    ] {
        call("DEL", ifname, network).assert_ok();
    }
    c.assert_nothing_left();
}

#[test]
fn the_cnitool_example_attaches_checks_and_releases_a_netns() {
    // examples/cnitool/attach.sh with the real cnitool 1.3 on its PATH, on a node whose CNI
    // directory holds the node-wide file and the shipped conflist as 05-contrail.conflist.
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let bin = TempDir::new();
    let dirs = CniDirs::at(&fx.node.conf_dir.0, &bin.0);
    let conflist = std::fs::read_to_string(repo_file("netconf/contrail.conflist")).unwrap();
    dirs.write_conf(
        "05-contrail.conflist",
        &serde_json::from_str(&conflist).unwrap(),
    );
    let _cache = private_dir("/var/lib/cni");
    let tools = TempDir::new();
    std::os::unix::fs::symlink(peer_bin("cnitool"), tools.0.join("cnitool")).unwrap();
    let attach = |command: &str| {
        let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", tools.0.display());
        let env = [
            ("PATH", path.as_str()),
            ("NETCONFPATH", fx.node.conf_dir.0.to_str().unwrap()),
            ("CNI_PATH", dirs.bin.to_str().unwrap()),
            (
                "CONTRAIL_CNI_CONF_DIR",
                fx.node.conf_dir.0.to_str().unwrap(),
            ),
        ];
        let out = std::process::Command::new(repo_file("examples/cnitool/attach.sh"))
            .args([command, &fx.ns.path(), &fx.pod.namespace, &fx.pod.name])
            .env_clear()
            .envs(env)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "attach.sh {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let result: Value = serde_json::from_str(&attach("add")).unwrap();
    let vmi = &fx.pod.vmis[0];
    assert_eq!(result["cniVersion"], "1.1.0");
    assert_eq!(fx.ns.mac("eth0"), vmi.mac);
    assert_eq!(fx.ns.addrs("eth0"), [vmi.addr()]);
    assert_eq!(fx.sim.ports().len(), 1);
    attach("check");
    attach("status");
    attach("del");
    fx.assert_nothing_left();
    // gc: libcni's DEL of what it cached (nothing now), then GC with no list: nothing to do.
    attach("gc");
}
