//! The ready-made files in netconf/ are the ones users copy: these tests drive the plugin with
//! exactly those files, through the real Multus thin (its config, the pod and NADs served by the
//! API), overriding only what points at this test's simulator and directories
//! (`netconf/genie-pod.yaml` goes through the real CNI-Genie in `e2e/genie.rs`).

use contrail_testkit::cluster::Nad;
use contrail_testkit::*;
use serde_json::Value;

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

#[test]
fn multus_pod_from_the_netconf_files() {
    // The pod (netconf/pod.yaml) and its NADs (netconf/networks.yaml), served by the API, and
    // the real Multus thin with netconf/00-multus.conf on a node whose file is
    // netconf/10-contrail.conf.
    let pod_doc = &yaml_docs("pod.yaml")[0];
    let namespace = pod_doc["metadata"]["namespace"].as_str().unwrap();
    let networks = annotation(pod_doc, "k8s.v1.cni.cncf.io/networks");
    let mut pod = PodSpec::annotated(namespace, &networks);
    pod.name = pod_doc["metadata"]["name"].as_str().unwrap().to_string();
    let nads: Vec<Nad> = yaml_docs("networks.yaml")
        .iter()
        .filter_map(|d| Nad::from_manifest(&serde_json::to_value(d).unwrap()))
        .collect();
    for nad in &nads {
        let conf: Value = serde_json::from_str(nad.config.as_deref().unwrap()).unwrap();
        assert!(
            conf.get("name").is_none(),
            "the shipped NADs rely on Multus injecting the name"
        );
    }
    let sim = Sim::start_cluster(&[&pod], &nads, &[]);
    let api = KubeApi::of(&sim);
    let mut node = Node::new(&sim);
    install_node_conf(&mut node);
    // The cluster network delegate of 00-multus.conf repeats the node's settings, which the
    // plugin accepts as they are the node's: pointed at this test's agent and directories.
    let mut conf: Value = serde_json::from_str(&netconf("00-multus.conf")).unwrap();
    for (k, v) in node.contrail().as_object().unwrap() {
        conf["delegates"][0]["contrail"][k] = v.clone();
    }
    let dirs = CniDirs::new();
    let multus = Multus::thin(&dirs, &api, &node, conf);
    let (ns, cid) = (Netns::new(), uuid());
    let out = multus.call("ADD", &pod, &cid, &ns.path());
    assert!(out.ok, "{out:?}\n{}", multus.log());

    // kube-manager's VMIs: index 0 for the cluster network, then one per entry in order.
    // Multus names them net1, net2 (net-a twice), net3 (other-ns/net-c), eth5 (net-b, asked).
    let vmis = sim.vmis_made(&pod);
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
        [("-4".into(), vmis[0].gateway.clone().unwrap(), "eth0".into())]
    );
    let status = api.network_status(&pod);
    let reported: Vec<(&str, &str)> = status
        .iter()
        .map(|e| (e["interface"].as_str().unwrap(), e["mac"].as_str().unwrap()))
        .collect();
    let want: Vec<(&str, &str)> = expect
        .iter()
        .map(|&(ifname, i)| (ifname, vmis[i].mac.as_str()))
        .collect();
    assert_eq!(reported, want);

    let out = multus.call("DEL", &pod, &cid, &ns.path());
    assert!(out.ok, "{out:?}\n{}", multus.log());
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(&pod));
    assert_eq!(sim.ports(), []);
}
