//! The ready-made files in netconf/ are the ones users copy: these tests drive the plugin with
//! exactly those files, the way Multus would read and pass them, overriding only what points
//! at this test's simulator and directories (`netconf/genie-pod.yaml` goes through the real
//! CNI-Genie in `e2e/genie.rs`).

use contrail_testkit::cluster::{multus_ifname, multus_selections};
use contrail_testkit::*;
use serde_json::{Value, json};

fn netconf(name: &str) -> String {
    std::fs::read_to_string(repo_file("netconf").join(name)).unwrap()
}

fn yaml_docs(name: &str) -> Vec<serde_yaml::Value> {
    let text = netconf(name);
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

fn annotation(doc: &serde_yaml::Value, key: &str) -> String {
    doc["metadata"]["annotations"][key]
        .as_str()
        .unwrap()
        .to_string()
}

/// netconf/10-contrail.conf as installed on the node, with this test's agent and directories.
fn install_node_conf(node: &mut Node) -> Value {
    node.install(serde_json::from_str(&netconf("10-contrail.conf")).unwrap())
}

/// One entry of the pod's networks annotation, as Multus resolves it.
struct Selection {
    namespace: String,
    network: String,
    ifname: String,
    /// The interface the pod asked for (the JSON form's `interface`).
    interface: Option<String>,
}

#[test]
fn multus_pod_from_the_netconf_files() {
    // The pod and its networks, from netconf/pod.yaml and netconf/networks.yaml.
    let pod_doc = &yaml_docs("pod.yaml")[0];
    let pod_ns = pod_doc["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    // As Multus reads the annotation (testkit::cluster): net<position> unless the pod asked.
    let networks = annotation(pod_doc, "k8s.v1.cni.cncf.io/networks");
    let selections: Vec<Selection> = multus_selections(&networks, &pod_ns)
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, w)| Selection {
            namespace: w.namespace.clone(),
            network: w.name.clone(),
            ifname: multus_ifname(w, i + 1),
            interface: w.interface.clone(),
        })
        .collect();
    let nads: Vec<serde_yaml::Value> = yaml_docs("networks.yaml");
    let nad_config = |s: &Selection| -> Value {
        let nad = nads
            .iter()
            .find(|d| {
                d["metadata"]["name"].as_str() == Some(&s.network)
                    && d["metadata"]["namespace"].as_str() == Some(&s.namespace)
            })
            .unwrap_or_else(|| panic!("no NAD {}/{} in networks.yaml", s.namespace, s.network));
        let mut conf: Value =
            serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
        assert!(
            conf.get("name").is_none(),
            "the shipped NADs rely on Multus injecting the name"
        );
        conf["name"] = json!(s.network); // what Multus injects: the NAD name, no namespace
        conf
    };

    // kube-manager's VMIs: index 0 for the cluster network, then one per selection in order.
    let mut vmis = vec![VmiSpec::new("default", 1)];
    for (i, s) in selections.iter().enumerate() {
        let mut v = VmiSpec::new(&s.network, i as u8 + 2);
        if let Some(name) = &s.interface {
            v = v.with("interface", json!(name));
        }
        vmis.push(v);
    }
    let mut pod = PodSpec::new(vmis.clone());
    pod.namespace = pod_ns;
    let mut fx = Fixture::with_pod(pod, &[]);
    install_node_conf(&mut fx.node);
    let (node, ns) = (&fx.node, &fx.ns);

    // The cluster network delegate from netconf/00-multus.conf, pointed at this test's agent:
    // it repeats the node's settings, which the plugin accepts as they are the node's.
    let multus_conf: Value = serde_json::from_str(&netconf("00-multus.conf")).unwrap();
    let mut cluster = multus_conf["delegates"][0].clone();
    for (k, v) in node.contrail().as_object().unwrap() {
        cluster["contrail"][k] = v.clone();
    }
    let mut delegates = vec![Delegate {
        bin: plugin_bin(),
        conf: cluster,
        ifname: "eth0".into(),
    }];
    for s in &selections {
        delegates.push(Delegate {
            bin: plugin_bin(),
            conf: nad_config(s),
            ifname: s.ifname.clone(),
        });
    }
    let multus = fx.multus();
    multus
        .add_all(&delegates)
        .unwrap_or_else(|(i, out)| panic!("delegate {i} failed: {out:?}"));

    // eth0 is the cluster VMI; net1, net2 net-a's first and second; net3 net-c; eth5 net-b.
    let expect = [
        ("eth0", 0),
        ("net1", 1),
        ("net2", 2),
        ("net3", 3),
        ("eth5", 4),
    ];
    assert_eq!(ns.ifnames(), ["eth0", "eth5", "lo", "net1", "net2", "net3"]);
    for (ifname, i) in expect {
        assert_eq!(
            (ns.mac(ifname), ns.addrs(ifname)),
            (vmis[i].mac.clone(), vec![vmis[i].addr()]),
            "{ifname}"
        );
    }
    assert_eq!(
        ns.default_routes(),
        [("-4".to_string(), "10.1.0.1".to_string(), "eth0".to_string())]
    );
    multus.del_all(&delegates);
    fx.assert_nothing_left();
}
