//! Combinations of what a pod with NET_ADMIN does to one of its Contrail interfaces (renames it,
//! deletes it, replaces it with a look-alike, changes its MAC or MTU, flushes its addresses,
//! sets it down, moves it to another namespace) and every call that may come next (CHECK, DEL,
//! GC, the sweep, `inspect`, the runtime's retried ADD): all of them, each on a fresh node. Every
//! case checks that the agent's registrations still follow the state files, that another pod of
//! the node is untouched, and that every call ended within its deadline; then the pod's DELs
//! leave nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use contrail_testkit::*;
use serde_json::{Value, json};

/// The testkit node's deadline (0.5 s x 6), and process start on a loaded 2-core machine.
const BOUND: Duration = Duration::from_secs(6);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tamper {
    Rename,
    Delete,
    LookAlike,
    Mac,
    Mtu,
    Addresses,
    Down,
    MovedAway,
}

const TAMPERINGS: [Tamper; 8] = [
    Tamper::Rename,
    Tamper::Delete,
    Tamper::LookAlike,
    Tamper::Mac,
    Tamper::Mtu,
    Tamper::Addresses,
    Tamper::Down,
    Tamper::MovedAway,
];

impl Tamper {
    /// Whether the pod still has a link named net1 that is not ours... or any at all.
    fn leaves_a_link_named_net1(self) -> bool {
        !matches!(self, Tamper::Rename | Tamper::Delete | Tamper::MovedAway)
    }
}

/// Pod A (eth0, and net-a twice: net1, net2), the target of the tampering, and pod B beside it
/// on the node.
struct Case {
    fx: Fixture,
    b: PodSpec,
    b_ns: Netns,
    b_cid: String,
    /// Where a pod moves its interface to (a namespace the test holds for it).
    elsewhere: Netns,
}

impl Case {
    fn new() -> Case {
        let b = PodSpec::new(vec![VmiSpec::new("default", 11)]);
        let pod = PodSpec::new(vec![
            VmiSpec::new("default", 1),
            VmiSpec::new("net-a", 2),
            VmiSpec::new("net-a", 3),
        ]);
        let sim = Sim::start(&[&pod, &b], &[]);
        let node = Node::new(&sim);
        let fx = Fixture {
            pod,
            sim,
            node,
            ns: Netns::new(),
            cid: uuid(),
        };
        let c = Case {
            fx,
            b,
            b_ns: Netns::new(),
            b_cid: uuid(),
            elsewhere: Netns::new(),
        };
        for (ifname, network) in [("eth0", "default"), ("net1", "net-a"), ("net2", "net-a")] {
            c.fx.add(ifname, network);
        }
        c.b_call("ADD").assert_ok();
        c
    }

    fn b_call(&self, command: &str) -> Output {
        let conf = self.fx.node.netconf("1.0.0", "default");
        let args = self.b.multus_args(&self.b_cid);
        self.fx
            .node
            .cni(command)
            .container(&self.b_cid)
            .netns(&self.b_ns.path())
            .ifname("eth0")
            .args(&args)
            .run(&conf)
    }

    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.fx.ns.name.as_str()];
        all.extend_from_slice(args);
        sh("ip", &all);
    }

    fn tamper(&self, t: Tamper) {
        let vmi = &self.fx.pod.vmis[1];
        match t {
            Tamper::Rename => {
                self.ip(&["link", "set", "net1", "down"]);
                self.ip(&["link", "set", "net1", "name", "moved1"]);
            }
            Tamper::Delete => self.ip(&["link", "del", "net1"]),
            Tamper::LookAlike => {
                self.ip(&["link", "set", "net1", "down"]);
                self.ip(&["link", "set", "net1", "name", "moved1"]);
                self.ip(&[
                    "link", "add", "net1", "address", &vmi.mac, "type", "veth", "peer", "name",
                    "fake1",
                ]);
                self.ip(&["addr", "add", &vmi.addr(), "dev", "net1"]);
                self.ip(&["link", "set", "net1", "up"]);
            }
            Tamper::Mac => self.ip(&["link", "set", "net1", "address", "02:aa:bb:cc:dd:ee"]),
            Tamper::Mtu => self.ip(&["link", "set", "net1", "mtu", "1400"]),
            Tamper::Addresses => self.ip(&["addr", "flush", "dev", "net1"]),
            Tamper::Down => self.ip(&["link", "set", "net1", "down"]),
            Tamper::MovedAway => {
                self.ip(&["link", "set", "net1", "netns", &self.elsewhere.name]);
            }
        }
    }

    /// Everything of pod B that a call for pod A must not change.
    fn pod_b(&self) -> Value {
        let state = self.fx.node.ports_dir().join(self.b.vm_name());
        let files: BTreeMap<String, String> = std::fs::read_dir(state)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let body = std::fs::read_to_string(e.path()).unwrap_or_default();
                (e.file_name().to_string_lossy().into_owned(), body)
            })
            .collect();
        let registered: Vec<_> = self
            .fx
            .registered()
            .into_iter()
            .filter(|(v, _, _)| *v == self.b.vmis[0].uuid)
            .collect();
        json!({"links": self.b_ns.ifnames(), "mac": self.b_ns.mac("eth0"),
               "mtu": self.b_ns.mtu("eth0"), "addrs": self.b_ns.addrs("eth0"),
               "routes": self.b_ns.default_routes(), "state": files, "registered": registered})
    }

    /// The registrations of pod A follow its state files.
    fn assert_consistent(&self, case: &str) {
        let a: Vec<String> = self
            .fx
            .registered()
            .into_iter()
            .map(|(v, _, _)| v)
            .filter(|v| self.fx.pod.vmis.iter().any(|m| m.uuid == *v))
            .collect();
        assert_eq!(a, self.fx.node.state_files(&self.fx.pod), "{case}");
    }

    /// Whatever the pod made or moved goes, then every DEL; nothing may be left.
    fn finish(self) {
        for name in ["net1", "fake1", "moved1"] {
            let _ = try_sh("ip", &["-n", &self.fx.ns.name, "link", "del", name]);
        }
        for (ifname, network) in [("net2", "net-a"), ("net1", "net-a"), ("eth0", "default")] {
            self.fx.del(ifname, network).assert_ok();
        }
        self.b_call("DEL").assert_ok();
        self.fx.assert_nothing_left();
        assert_eq!(self.fx.node.leftovers(), [] as [String; 0]);
    }
}

fn timed(case: &str, f: impl FnOnce() -> Output) -> Output {
    let started = Instant::now();
    let out = f();
    assert!(started.elapsed() < BOUND, "{case}: {:?}", started.elapsed());
    out
}

/// CHECK of net1 after the tampering, as libcni sends it.
fn check(c: &Case) -> Output {
    let mut conf = c.fx.conf("net-a");
    conf["prevResult"] = json!({});
    c.fx.call("CHECK", "net1", &conf)
}

/// Runs `then` after each tampering on a fresh node, with the checks every case shares.
fn each(command: &str, then: impl Fn(&Case, Tamper, &str)) {
    for t in TAMPERINGS {
        let c = Case::new();
        let before = c.pod_b();
        c.tamper(t);
        let case = format!("{t:?} then {command}");
        then(&c, t, &case);
        c.assert_consistent(&case);
        assert_eq!(c.pod_b(), before, "{case}: pod B changed");
        c.finish();
    }
}

#[test]
fn check_fails_on_every_tampering() {
    each("CHECK", |c, _, case| {
        let out = timed(case, || check(c));
        assert_eq!(out.code(), 103, "{case}: {}", out.stdout);
        assert!(out.msg().contains("net1"), "{case}: {}", out.msg());
    });
}

#[test]
fn inspect_reports_every_tampering() {
    each("inspect", |c, t, case| {
        let rows = c.fx.node.inspect();
        let health = |vmi: &str| {
            rows.iter()
                .find(|r| r["vmi"] == vmi)
                .map(|r| r["health"].as_str().unwrap().to_string())
                .unwrap_or_default()
        };
        let target = health(&c.fx.pod.vmis[1].uuid);
        assert_ne!(target, "ok", "{case}");
        // Where the interface is there to compare, `inspect` says what CHECK says.
        if t.leaves_a_link_named_net1() {
            assert_eq!(target, check(c).msg(), "{case}");
        }
        for sibling in [&c.fx.pod.vmis[0], &c.fx.pod.vmis[2], &c.b.vmis[0]] {
            assert_eq!(health(&sibling.uuid), "ok", "{case}");
        }
    });
}

#[test]
fn del_releases_the_attachment_whatever_was_done_to_it() {
    each("DEL", |c, t, case| {
        let out = timed(case, || c.fx.del("net1", "net-a"));
        out.assert_ok();
        let vmi = &c.fx.pod.vmis[1].uuid;
        assert!(!host_link_exists(&host_ifname(vmi)), "{case}");
        assert!(!c.fx.node.state_files(&c.fx.pod).contains(vmi), "{case}");
        // What the pod made itself is the pod's.
        if t == Tamper::LookAlike {
            assert!(c.fx.ns.ifnames().contains(&"net1".to_string()), "{case}");
        }
        // The siblings stay, registered.
        assert_eq!(c.fx.ns.mac("net2"), c.fx.pod.vmis[2].mac, "{case}");
    });
}

#[test]
fn gc_keeps_a_live_pod_whatever_was_done_to_it() {
    each("GC", |c, _, case| {
        let files = c.fx.node.state_files(&c.fx.pod);
        let valid = json!([{"containerID": c.fx.cid, "ifname": "eth0"},
                           {"containerID": c.b_cid, "ifname": "eth0"}]);
        timed(case, || c.fx.node.gc(valid)).assert_ok();
        assert_eq!(c.fx.node.state_files(&c.fx.pod), files, "{case}");
    });
}

#[test]
fn the_sweep_keeps_a_live_pod_whatever_was_done_to_it() {
    each("sweep", |c, _, case| {
        let files = c.fx.node.state_files(&c.fx.pod);
        let dir = TempDir::new();
        let watch = Watch::start(
            &dir.0.join("bin"),
            &dir.0.join("net.d"),
            &c.fx.node.node_file(),
            &["--sweep-interval", "1", "--sweep-grace", "0"],
        );
        // The watch copies the binary and sweeps a second later; seconds on a busy machine.
        wait_for("a sweep", Duration::from_secs(60), || {
            watch.log().contains("sweep released 0 attachment(s)")
        });
        watch.terminate();
        assert_eq!(c.fx.node.state_files(&c.fx.pod), files, "{case}");
    });
}

#[test]
fn a_retried_add_replaces_what_is_its_own_and_refuses_what_is_not() {
    each("retried ADD", |c, t, case| {
        let out = timed(case, || c.fx.call("ADD", "net1", &c.fx.conf("net-a")));
        if t == Tamper::LookAlike {
            // The pod's own net1 is in the way: refused, nothing changed.
            assert_eq!(out.code(), 102, "{case}: {}", out.stdout);
            assert!(host_link_exists(&host_ifname(&c.fx.pod.vmis[1].uuid)));
        } else {
            out.assert_ok();
            assert_eq!(c.fx.ns.mac("net1"), c.fx.pod.vmis[1].mac, "{case}");
            check(c).assert_ok();
        }
    });
}
