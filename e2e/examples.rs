//! The pods' networks annotations as the cluster reads them: kube-manager makes the VMIs (the
//! simulator's model of its reading, `sim/src/kube_manager.rs`), Multus calls the plugin once
//! per entry it reads (`contrail_testkit::cluster`). Every example pod of the README, `docs/` and
//! `netconf/` gets a VMI for each of Multus's attachments; the readings that part ways get a
//! code 101 that says why, at once, leaving nothing; Multus's dynamic networks: a removed
//! attachment's DEL leaves the others whole, an added one fails at once.

use std::path::Path;

use contrail_testkit::cluster::{Nad, multus_ifname, multus_selections};
use contrail_testkit::*;
use serde_json::{Value, json};

/// Every YAML document of the README, `docs/` and `netconf/`: the fenced `yaml` blocks of the
/// Markdown (indented ones too), the YAML files whole. (source, document as JSON)
fn manifests() -> Vec<(String, Value)> {
    let mut texts = Vec::new();
    let mut md = vec![repo_file("README.md")];
    let mut yaml = Vec::new();
    for (dir, into) in [("docs", &mut md), ("netconf", &mut yaml)] {
        for e in std::fs::read_dir(repo_file(dir)).unwrap() {
            let p = e.unwrap().path();
            let ext = p.extension().and_then(|x| x.to_str()).unwrap_or("");
            if (dir == "docs" && ext == "md") || (dir == "netconf" && ext == "yaml") {
                into.push(p);
            }
        }
    }
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

fn show(p: &Path) -> String {
    p.strip_prefix(repo_file(""))
        .unwrap_or(p)
        .display()
        .to_string()
}

const ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";

/// A pod the cluster has (by its annotation), the NADs, and what the plugin runs against.
struct Cluster {
    pod: PodSpec,
    nads: Vec<Nad>,
    node: Node,
    sim: Sim,
    ns: Netns,
    cid: String,
}

impl Cluster {
    fn new(namespace: &str, annotation: &str, nads: &[Nad]) -> Cluster {
        let pod = PodSpec::annotated(namespace, annotation);
        let sim = Sim::start_cluster(&[&pod], nads, &[]);
        let mut node = Node::new(&sim);
        node.roomy();
        Cluster {
            pod,
            nads: nads.to_vec(),
            node,
            sim,
            ns: Netns::new(),
            cid: uuid(),
        }
    }

    /// How kube-manager read the pod's annotation (`GET /sim/kube-manager`).
    fn kube_manager(&self) -> Value {
        self.sim.get("/sim/kube-manager")[0].clone()
    }

    /// One call for the pod's attachment `ifname` on `network`, with the minimal config a NAD
    /// of that network gives Multus.
    fn call(&self, command: &str, ifname: &str, network: &str) -> Output {
        let conf = json!({"cniVersion": "1.0.0", "name": network, "type": "contrail-k8s-cni"});
        let args = self.pod.multus_args(&self.cid);
        self.node
            .cni(command)
            .container(&self.cid)
            .netns(&self.ns.path())
            .ifname(ifname)
            .args(&args)
            .run(&conf)
    }

    /// Multus's attachments for the pod after the cluster network: (ifname, network), each
    /// network by its NAD (the test fails when an annotation names a NAD no example has).
    fn delegates(&self, annotation: &str) -> Vec<(String, String)> {
        let selections = multus_selections(annotation, &self.pod.namespace)
            .unwrap_or_else(|e| panic!("Multus refuses {annotation:?}: {e}"));
        selections
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let nad = self
                    .nads
                    .iter()
                    .find(|n| n.namespace == s.namespace && n.name == s.name)
                    .unwrap_or_else(|| panic!("{annotation:?}: no NAD {}/{}", s.namespace, s.name));
                (multus_ifname(s, i + 1), nad.network())
            })
            .collect()
    }

    /// Nothing of the pod is left: only `lo` in it, no state, no registration.
    #[track_caller]
    fn assert_nothing_left(&self) {
        assert_eq!(self.ns.ifnames(), ["lo"]);
        assert!(!self.node.pod_dir_exists(&self.pod));
        assert_eq!(self.sim.ports(), []);
    }
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
    // The README's, docs/install.md's, docs/vhost-user.md's, netconf/pod.yaml's and
    // netconf/dpdk.yaml's pods at least.
    assert!(pods.len() >= 5, "{pods:?}");
    for (source, pod) in pods {
        let annotation = pod["metadata"]["annotations"][ANNOTATION].as_str().unwrap();
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
        let c = Cluster::new(namespace, annotation, &nads);
        let read = c.kube_manager();
        let delegates = c.delegates(annotation);
        assert!(
            read["entries"]
                .as_array()
                .is_some_and(|e| e.iter().all(|e| e["kept"] == true)),
            "{source}: kube-manager skips an entry of {annotation:?}: {read}"
        );
        // Every attachment Multus makes gets its VMI (a vhost-user network's as a veth here:
        // the VMI is the point, not the kind).
        c.call("ADD", "eth0", "contrail-k8s-cni").assert_ok();
        for (ifname, network) in &delegates {
            let out = c.call("ADD", ifname, network);
            assert!(
                out.ok,
                "{source}: {annotation:?}: ADD {ifname} on {network}: {out:?}"
            );
        }
        assert_eq!(c.sim.ports().len(), delegates.len() + 1, "{source}");
        for (ifname, network) in delegates.iter().rev() {
            c.call("DEL", ifname, network).assert_ok();
        }
        c.call("DEL", "eth0", "contrail-k8s-cni").assert_ok();
        c.assert_nothing_left();
    }
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
    let fails = |c: &Cluster, ifname: &str, network: &str| -> String {
        let out = c.call("ADD", ifname, network);
        assert_eq!(out.code(), 101, "{out:?}");
        assert!(!c.ns.ifnames().contains(&ifname.to_string()));
        let msg = out.msg();
        assert!(
            msg.contains("docs/multus.md#when-kube-manager-made-no-vmi-for-an-attachment"),
            "{msg}"
        );
        msg
    };
    // A space after the comma: one net-a VMI, so net2 finds it taken.
    let c = Cluster::new("default", "net-a, net-a", &nads);
    let read = c.kube_manager();
    assert_eq!(read["entries"][1]["entry"], " net-a");
    assert_eq!(read["entries"][1]["kept"], false, "{read}");
    assert_eq!(c.delegates("net-a, net-a").len(), 2);
    c.call("ADD", "eth0", "contrail-k8s-cni").assert_ok();
    c.call("ADD", "net1", "net-a").assert_ok();
    let msg = fails(&c, "net2", "net-a");
    assert!(msg.contains("`net-a,net-a`"), "{msg}");
    c.call("DEL", "net1", "net-a").assert_ok();
    c.call("DEL", "eth0", "contrail-k8s-cni").assert_ok();
    c.assert_nothing_left();
    // `@ifname` in the string form: no VMI for net-a; the interface is not Multus's net<k>.
    let c = Cluster::new("default", "net-a@eth5,net-b", &nads);
    assert_eq!(
        c.delegates("net-a@eth5,net-b"),
        [
            ("eth5".to_string(), "net-a".to_string()),
            ("net2".to_string(), "net-b".to_string())
        ]
    );
    c.call("ADD", "eth0", "contrail-k8s-cni").assert_ok();
    let msg = fails(&c, "eth5", "net-a");
    assert!(msg.contains("`net-a@eth5`"), "{msg}");
    assert!(msg.contains(r#""interface": "eth5""#), "{msg}");
    // A refusal makes nothing: inspect shows it from the node's log.
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
    c.call("ADD", "net2", "net-b").assert_ok();
    // A conflist NAD: no VMI, and the message names that cause.
    let c2 = Cluster::new("default", "net-list", &nads);
    c2.call("ADD", "eth0", "contrail-k8s-cni").assert_ok();
    let msg = fails(&c2, "net1", "net-list");
    assert!(msg.contains("conflist"), "{msg}");
    for c in [&c, &c2] {
        for (ifname, network) in [("net2", "net-b"), ("eth0", "contrail-k8s-cni")] {
            c.call("DEL", ifname, network).assert_ok();
        }
        c.assert_nothing_left();
    }
    // The JSON form with a space before it is read as the string form by kube-manager.
    let json_late = r#" [{"name": "net-a"}]"#;
    let c = Cluster::new("default", json_late, &nads);
    assert_eq!(c.delegates(json_late), [("net1".into(), "net-a".into())]);
    assert_eq!(c.kube_manager()["entries"][0]["kept"], false);
}

#[test]
fn multus_dynamic_networks_remove_an_attachment_and_cannot_add_one() {
    let nads = [
        Nad::contrail("default", "net-a"),
        Nad::contrail("default", "net-b"),
    ];
    let c = Cluster::new("default", "net-a,net-b", &nads);
    c.call("ADD", "eth0", "contrail-k8s-cni").assert_ok();
    c.call("ADD", "net1", "net-a").assert_ok();
    c.call("ADD", "net2", "net-b").assert_ok();
    let vmis = |c: &Cluster| c.sim.get(&format!("/vm-cfg/{}", c.pod.vm_name()));
    let before = vmis(&c);
    // net-a is removed from the annotation: Multus DELs it. The others stay whole and
    // registered; the VMI stays the pod's (kube-manager deletes VMIs only with the pod).
    c.call("DEL", "net1", "net-a").assert_ok();
    assert_eq!(c.ns.ifnames(), ["eth0", "lo", "net2"]);
    c.call("CHECK", "net2", "net-b").assert_ok();
    c.call("CHECK", "eth0", "contrail-k8s-cni").assert_ok();
    assert_eq!(c.sim.ports().len(), 2);
    assert_eq!(vmis(&c), before);
    // net-a is added back as net3, and net-c for the first time: kube-manager makes no VMI for a
    // running pod. net3 gets net-a's VMI again (it is free); net-c fails at once, leaving
    // nothing.
    c.call("ADD", "net3", "net-a").assert_ok();
    let started = std::time::Instant::now();
    let out = c.call("ADD", "net4", "net-c");
    assert_eq!(out.code(), 101, "{out:?}");
    let msg = out.msg();
    assert!(msg.contains("added to the pod after it started"), "{msg}");
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
        c.call("DEL", ifname, network).assert_ok();
    }
    c.assert_nothing_left();
}
