//! Combinations, not one case at a time: pod shapes generated from a seed (1 to 6 attachments,
//! repeated networks, IPv4-only, IPv6-only and dual-stack networks, /24 and /32, /128 and /64,
//! `interface` and `default-gw` annotations, another plugin's interface in between, random VMI
//! uuids), run through the simulator as Multus runs a pod (ADD in order, CHECK, sometimes a DEL
//! and ADD of one attachment, DEL in reverse), and checked against a model of what the pod and
//! the agent must show.
//!
//! Each run draws fresh seeds; a failure prints its seed. Replay one with
//! `CONTRAIL_COMBO_SEED=<seed> cargo nextest run --release combos`.

use std::collections::BTreeSet;

use contrail_testkit::*;
use serde_json::{Value, json};

/// Cases per test function; four functions run in parallel.
const CASES: u64 = 8;

/// How a network's IPAM looks: the families it has and their prefix lengths.
#[derive(Debug, Clone, Copy)]
struct Ipam {
    /// IPv4 prefix length, if the network has IPv4.
    v4: Option<u8>,
    /// IPv6 prefix length as the agent reports it (None: no `v6-plen`, a /128), if it has IPv6.
    v6: Option<Option<u8>>,
}

#[derive(Debug, Clone)]
enum Attachment {
    /// A Contrail attachment: the VMI (index into the pod's VMIs) and its interface name.
    Contrail { vmi: usize, ifname: String },
    /// Debian's macvlan, as another plugin of the pod.
    Other { ifname: String },
}

/// One generated pod: its VMIs (in index order), its attachments in Multus order, and the
/// IPAM of each of its networks.
#[derive(Debug)]
struct Shape {
    vmis: Vec<VmiSpec>,
    attachments: Vec<Attachment>,
    /// Which attachment Multus DELs and ADDs again before the end, if any.
    readd: Option<usize>,
}

const NETWORKS: [&str; 4] = ["default", "net-a", "net-b", "net-c"];

fn shape(seed: u64) -> Shape {
    let mut rng = Rng(seed);
    let ipam: Vec<Ipam> = NETWORKS
        .iter()
        .map(|_| {
            let fam = rng.below(3); // 0: v4 only, 1: v6 only, 2: dual stack
            Ipam {
                v4: (fam != 1).then(|| if rng.chance(25) { 32 } else { 24 }),
                v6: (fam != 0).then(|| rng.chance(25).then_some(64)),
            }
        })
        .collect();
    let count = 1 + rng.below(6) as usize;
    let mut networks = vec![0usize]; // index 0: the cluster network, on eth0
    let mut attachments = vec![];
    let mut other_used = false;
    for position in 1..count {
        if !other_used && rng.chance(20) {
            other_used = true;
            attachments.push((position, None));
            continue;
        }
        // Biased towards net-a, so that networks repeat.
        let n = [1, 1, 1, 2, 2, 3][rng.below(6) as usize];
        attachments.push((position, Some(networks.len())));
        networks.push(n);
    }
    let mut per_network = [0u8; NETWORKS.len()];
    let mut vmis: Vec<VmiSpec> = networks
        .iter()
        .map(|&n| {
            per_network[n] += 1;
            vmi(&mut rng, n, per_network[n], ipam[n])
        })
        .collect();
    // The interface names Multus gives: eth0, then net<position>, unless the pod asked.
    let mut all = vec![Attachment::Contrail {
        vmi: 0,
        ifname: "eth0".into(),
    }];
    for (position, vmi) in attachments {
        let ifname = format!("net{position}");
        all.push(match vmi {
            None => Attachment::Other { ifname },
            Some(k) if rng.chance(20) => {
                let asked = format!("data{k}");
                vmis[k] = vmis[k].clone().with("interface", json!(asked));
                Attachment::Contrail {
                    vmi: k,
                    ifname: asked,
                }
            }
            Some(k) => Attachment::Contrail { vmi: k, ifname },
        });
    }
    if rng.chance(30) {
        let k = rng.below(vmis.len() as u64) as usize;
        vmis[k] = vmis[k].clone().with("default-gw", json!(true));
    }
    let readd = rng.chance(40).then(|| rng.below(all.len() as u64) as usize);
    Shape {
        vmis,
        attachments: all,
        readd,
    }
}

/// VMI `j` (1-based) of network `n`: the network's gateways, its own addresses.
fn vmi(rng: &mut Rng, n: usize, j: u8, ipam: Ipam) -> VmiSpec {
    let net = n + 1;
    let mut v = VmiSpec::new(NETWORKS[n], net as u8);
    v.uuid = rng.uuid();
    v.mac = format!(
        "02:{:02x}:{:02x}:{:02x}:{net:02x}:{j:02x}",
        rng.below(256),
        rng.below(256),
        rng.below(256)
    );
    v.ip = ipam.v4.map(|p| format!("10.{net}.0.{}/{p}", 10 + j));
    v.gateway = ipam.v4.map(|_| format!("10.{net}.0.1"));
    v.ip6 = ipam.v6.map(|_| format!("fd00:{net}::{}", 10 + j));
    v.v6_gateway = ipam.v6.map(|_| format!("fd00:{net}::1"));
    if let Some(Some(p)) = ipam.v6 {
        v = v.with("v6-plen", json!(p));
    }
    v
}

/// The addresses an interface must carry, as `ip` shows them.
fn addresses(v: &VmiSpec) -> Vec<String> {
    let plen6 = v
        .extra
        .get("v6-plen")
        .and_then(Value::as_u64)
        .unwrap_or(128);
    v.ip.iter()
        .cloned()
        .chain(v.ip6.iter().map(|a| format!("{a}/{plen6}")))
        .collect()
}

/// The VMI that carries the pod's default routes: annotated `default-gw`, else the cluster
/// network's.
fn default_gw(vmis: &[VmiSpec]) -> usize {
    vmis.iter()
        .position(|v| v.extra.get("default-gw").is_some())
        .unwrap_or(0)
}

/// One pod through a Multus sequence, checked against the model at every stage.
struct Run<'a> {
    shape: &'a Shape,
    fx: Fixture,
    master: HostLink,
    results: Vec<Option<Value>>,
}

impl Run<'_> {
    fn new(shape: &Shape) -> Run<'_> {
        let fx = Fixture::new(shape.vmis.clone());
        let master = HostLink::macvlan_master();
        let results = vec![None; shape.attachments.len()];
        Run {
            shape,
            fx,
            master,
            results,
        }
    }

    fn delegate(&self, a: &Attachment) -> Delegate {
        match a {
            Attachment::Contrail { vmi, ifname } => {
                let network = if *vmi == 0 {
                    "contrail-k8s-cni"
                } else {
                    self.fx.pod.vmis[*vmi].network.as_str()
                };
                Delegate::contrail(&self.fx.node, "1.0.0", network, ifname)
            }
            Attachment::Other { ifname } => Delegate::debian(
                json!({"cniVersion": "1.0.0", "name": "macvlan-net", "type": "macvlan",
                       "master": self.master.0, "mode": "bridge",
                       "ipam": {"type": "static", "addresses": [{"address": "192.168.77.5/24"}]}}),
                ifname,
            ),
        }
    }

    fn add(&mut self, i: usize) {
        let d = self.delegate(&self.shape.attachments[i]);
        let r = self.fx.caller().call("ADD", &d).assert_ok().json();
        self.results[i] = Some(r);
    }

    fn del(&mut self, i: usize) {
        let d = self.delegate(&self.shape.attachments[i]);
        self.fx.caller().call("DEL", &d).assert_ok();
        self.results[i] = None;
    }

    /// The Contrail attachments that are up: (attachment, VMI, ifname).
    fn up(&self) -> Vec<(usize, usize, &str)> {
        self.shape
            .attachments
            .iter()
            .enumerate()
            .filter(|(i, _)| self.results[*i].is_some())
            .filter_map(|(i, a)| match a {
                Attachment::Contrail { vmi, ifname } => Some((i, *vmi, ifname.as_str())),
                Attachment::Other { .. } => None,
            })
            .collect()
    }

    /// The pod and the agent against the model.
    #[track_caller]
    fn check(&self, stage: &str) {
        let up = self.up();
        let (vmis, ns) = (&self.fx.pod.vmis, &self.fx.ns);
        let mut want_ifnames: BTreeSet<String> = up.iter().map(|u| u.2.to_string()).collect();
        want_ifnames.insert("lo".into());
        for (i, a) in self.shape.attachments.iter().enumerate() {
            if let (Attachment::Other { ifname }, Some(_)) = (a, &self.results[i]) {
                want_ifnames.insert(ifname.clone());
                assert_eq!(ns.addrs(ifname), ["192.168.77.5/24"], "{stage}");
            }
        }
        let have: BTreeSet<String> = ns.ifnames().into_iter().collect();
        assert_eq!(have, want_ifnames, "{stage}: interfaces");
        for &(i, k, ifname) in &up {
            let v = &vmis[k];
            assert_eq!(ns.mac(ifname), v.mac, "{stage}: {ifname} MAC");
            assert_eq!(ns.addrs(ifname), addresses(v), "{stage}: {ifname}");
            let d = self.delegate(&self.shape.attachments[i]);
            let mut d = d;
            d.conf["prevResult"] = self.results[i].clone().unwrap();
            self.fx.caller().call("CHECK", &d).assert_ok();
        }
        // Exactly one default route per family the default-gw VMI has, on its interface.
        let gw = default_gw(vmis);
        let mut want_routes = Vec::new();
        if let Some(&(_, _, ifname)) = up.iter().find(|u| u.1 == gw) {
            let v = &vmis[gw];
            if let Some(g) = &v.gateway {
                want_routes.push(("-4".to_string(), g.clone(), ifname.to_string()));
            }
            if let Some(g) = &v.v6_gateway {
                want_routes.push(("-6".to_string(), g.clone(), ifname.to_string()));
            }
        }
        let mut routes = ns.default_routes();
        routes.sort();
        assert_eq!(routes, want_routes, "{stage}: default routes");
        // The agent has exactly the attachments that are up, under their host names.
        let mut want_ports: Vec<(String, String, String)> = up
            .iter()
            .map(|&(_, k, ifname)| {
                let u = &vmis[k].uuid;
                (u.clone(), host_ifname(u), ifname.to_string())
            })
            .collect();
        want_ports.sort();
        let mut ports = self.fx.sim.ports();
        ports.sort();
        assert_eq!(ports, want_ports, "{stage}: registrations");
        let mut want_files: Vec<String> = up.iter().map(|u| vmis[u.1].uuid.clone()).collect();
        want_files.sort();
        assert_eq!(
            self.fx.node.state_files(&self.fx.pod),
            want_files,
            "{stage}: state"
        );
    }
}

fn run_case(seed: u64) {
    let shape = shape(seed);
    let mut run = Run::new(&shape);
    for i in 0..shape.attachments.len() {
        run.add(i);
        run.check(&format!("after ADD #{i}"));
    }
    if let Some(i) = shape.readd {
        run.del(i);
        run.check(&format!("after DEL #{i}"));
        run.add(i);
        run.check(&format!("after ADD #{i} again"));
    }
    for i in (0..shape.attachments.len()).rev() {
        run.del(i);
        run.check(&format!("after DEL #{i}"));
    }
    run.fx.assert_nothing_left();
}

fn run_seeds(shard: u64) {
    let describe = |seed| format!("{:#?}", shape(seed));
    for_each_seed(
        "CONTRAIL_COMBO_SEED",
        "combos",
        CASES,
        shard,
        describe,
        run_case,
    );
}

#[test]
fn combos_0() {
    run_seeds(0);
}

#[test]
fn combos_1() {
    run_seeds(1);
}

#[test]
fn combos_2() {
    run_seeds(2);
}

#[test]
fn combos_3() {
    run_seeds(3);
}
