//! The fixture: one pod of a test, with its simulator, node, netns and sandbox, and the rules
//! every call keeps.

use serde_json::{Value, json};

use crate::bins::{sh, uuid};
use crate::cni::Output;
use crate::delegate::Caller;
use crate::netns::{Netns, host_ifname, host_link_exists};
use crate::node::Node;
use crate::pod::{PodSpec, VmiSpec};
use crate::sim::Sim;

/// One pod of a test: its VMIs in a simulator of its own, a node's plugin config, a network
/// namespace and a sandbox (container id). Calls go as Multus makes them: its CNI_ARGS, the
/// NetworkAttachmentDefinition's config with the network's name.
pub struct Fixture {
    pub pod: PodSpec,
    pub sim: Sim,
    pub node: Node,
    pub ns: Netns,
    pub cid: String,
}

impl Fixture {
    pub fn new(vmis: Vec<VmiSpec>) -> Fixture {
        Fixture::with_sim(vmis, &[])
    }

    /// With simulator switches (faults, `--state-dir`, ...).
    pub fn with_sim(vmis: Vec<VmiSpec>, sim_args: &[&str]) -> Fixture {
        Fixture::with_pod(PodSpec::new(vmis), sim_args)
    }

    /// For a pod made beforehand: its namespace or name from a manifest, or its name and uuid
    /// already in crafted agent answers.
    pub fn with_pod(pod: PodSpec, sim_args: &[&str]) -> Fixture {
        let sim = Sim::start(&[&pod], sim_args);
        let node = Node::new(&sim);
        Fixture {
            pod,
            sim,
            node,
            ns: Netns::new(),
            cid: uuid(),
        }
    }

    /// Sets a key of the node-wide file.
    pub fn set(&mut self, key: &str, value: Value) -> &mut Fixture {
        self.node.set(key, value);
        self
    }

    /// `f` under another request budget than the node's (poll-timeout in seconds,
    /// poll-retries), which is put back after: a test bounds the deadline of the call it is
    /// about without making the calls around it a race with a busy machine's scheduler.
    pub fn under<T>(&mut self, (timeout, retries): (f64, u32), f: impl FnOnce(&Fixture) -> T) -> T {
        let contrail = self.node.contrail();
        let saved = (
            contrail["poll-timeout"].clone(),
            contrail["poll-retries"].clone(),
        );
        self.set("poll-timeout", json!(timeout))
            .set("poll-retries", json!(retries));
        let out = f(self);
        self.set("poll-timeout", saved.0)
            .set("poll-retries", saved.1);
        out
    }

    pub fn args(&self) -> String {
        self.pod.multus_args(&self.cid)
    }

    /// The config Multus hands the delegate for `network` (cniVersion 1.0.0).
    pub fn conf(&self, network: &str) -> Value {
        self.node.netconf("1.0.0", network)
    }

    /// A call with this config, in the pod's netns.
    pub fn call(&self, command: &str, ifname: &str, conf: &Value) -> Output {
        self.call_in(&self.cid, &self.ns.path(), command, ifname, conf)
    }

    /// A call for another sandbox of the pod: its container id and netns path.
    pub fn call_in(
        &self,
        cid: &str,
        netns: &str,
        command: &str,
        ifname: &str,
        conf: &Value,
    ) -> Output {
        let args = self.pod.multus_args(cid);
        self.node
            .cni(command)
            .container(cid)
            .netns(netns)
            .ifname(ifname)
            .args(&args)
            .run(conf)
    }

    /// A caller of delegates in the pod's sandbox, with Multus's CNI_ARGS.
    pub fn caller(&self) -> Caller<'_> {
        Caller {
            node: &self.node,
            container_id: self.cid.clone(),
            netns: self.ns.path(),
            args: self.args(),
        }
    }

    /// The pod's netns goes away (a node reboot, a runtime that removed it first); later calls
    /// still name its path.
    pub fn remove_netns(&self) {
        sh("ip", &["netns", "del", &self.ns.name]);
    }

    /// The agent dies: nothing listens on its port any more (until [`Fixture::restart_agent`]).
    pub fn stop_agent(&mut self) {
        self.sim.stop();
    }

    /// The agent restarts on another port with new switches, as [`Sim::restart`], and the node
    /// is pointed at it.
    pub fn restart_agent(&mut self, sim_args: &[&str]) {
        self.sim.restart(sim_args);
        self.point_at_agent();
    }

    /// The pod's VMIs change in Contrail (`change` edits them) and the agent, restarted on
    /// another port, serves them so.
    pub fn change_vmis(&mut self, change: impl FnOnce(&mut Vec<VmiSpec>)) {
        change(&mut self.pod.vmis);
        self.sim.restart_with(&[&self.pod], &[]);
        self.point_at_agent();
    }

    fn point_at_agent(&mut self) {
        self.node.port = self.sim.port;
        self.node.set("vrouter-port", json!(self.sim.port));
    }

    /// ADD, which must succeed: its result.
    #[track_caller]
    pub fn add(&self, ifname: &str, network: &str) -> Value {
        self.call("ADD", ifname, &self.conf(network))
            .assert_ok()
            .json()
    }

    pub fn del(&self, ifname: &str, network: &str) -> Output {
        self.call("DEL", ifname, &self.conf(network))
    }

    /// CHECK with the ADD result as prevResult, as libcni sends it.
    pub fn check(&self, ifname: &str, network: &str, prev: &Value) -> Output {
        let mut conf = self.conf(network);
        conf["prevResult"] = prev.clone();
        self.call("CHECK", ifname, &conf)
    }

    /// The agent's registered ports: (vmi uuid, host ifname, vm ifname).
    pub fn registered(&self) -> std::collections::BTreeSet<(String, String, String)> {
        self.sim.ports().into_iter().collect()
    }

    /// The rule every call keeps: the agent has exactly the pod's attachments that have a state
    /// file registered (a reservation or a pending release explains no registration).
    #[track_caller]
    pub fn assert_registrations_follow_files(&self) {
        let registered: Vec<String> = self.registered().into_iter().map(|(v, _, _)| v).collect();
        assert_eq!(registered, self.node.state_files(&self.pod));
    }

    /// The rule every call keeps, as it stands when a call's deadline cut its deregistration
    /// short: the agent holds no port of the pod that neither a state file nor a pending
    /// release explains, and while no release is pending, exactly the pod's attachments that
    /// have a state file (the next call for the pod, GC or the sweep finishes a pending one).
    #[track_caller]
    pub fn assert_registrations_explained(&self) {
        let registered: Vec<String> = self.registered().into_iter().map(|(v, _, _)| v).collect();
        let (files, pending) = (
            self.node.state_files(&self.pod),
            self.node.pending(&self.pod),
        );
        if pending.is_empty() {
            assert_eq!(registered, files);
        }
        for vmi in &registered {
            assert!(
                files.contains(vmi) || pending.contains(vmi),
                "port {vmi} registered, with no state file and no pending release: files \
                 {files:?}, pending {pending:?}"
            );
        }
    }

    /// What a failed ADD leaves: no interface in the netns, no host end, no attachment; at most
    /// the reservations of the VMIs it claimed (see [`Node::reservations`]), which its DEL or
    /// retry takes, and a registration its rollback could not drop within the call's deadline,
    /// recorded as a pending release for the next call (a timed-out ADD's rollback has what
    /// is left of that deadline, 50 ms a request at least).
    #[track_caller]
    pub fn assert_rolled_back(&self) {
        assert_eq!(self.ns.ifnames(), ["lo"]);
        for v in &self.pod.vmis {
            let tap = host_ifname(&v.uuid);
            assert!(!host_link_exists(&tap), "host end {tap} left behind");
        }
        assert_eq!(self.node.state_files(&self.pod), [] as [String; 0]);
        self.assert_registrations_explained();
    }

    /// Nothing of the pod is left: no interface in the netns, no host end, no state (not even a
    /// reservation), no port.
    #[track_caller]
    pub fn assert_nothing_left(&self) {
        self.assert_rolled_back();
        assert_eq!(self.sim.ports(), [], "port left registered");
        assert!(
            !self.node.pod_dir_exists(&self.pod),
            "state left: reservations {:?}, pending {:?}; the node's warnings:\n{}",
            self.node.reservations(&self.pod),
            self.node.pending(&self.pod),
            self.node.warnings()
        );
    }
}

/// The host end of an ADD result: its first interface.
pub fn host_name(result: &Value) -> String {
    result["interfaces"][0]["name"]
        .as_str()
        .unwrap()
        .to_string()
}
