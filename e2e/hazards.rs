//! Nothing left behind, ever: one test per hazard an adversarial run found (the host's own
//! namespace, racing calls on one pod, failed ADDs that left files, a hostile state directory,
//! sizes taken from the agent's word, a briefly busy agent). Kills at every step are in
//! e2e/crash.rs; e2e/stress.rs looks for the whole class from random seeds.

use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use contrail_testkit::*;
use serde_json::{Value, json};

/// What tells a hang (a FIFO read, a call waiting for what never comes) from a busy machine's
/// slowness: the hangs here would last forever, a call takes milliseconds.
const HANG: Duration = Duration::from_secs(30);

/// Runs every call at once (released together by a barrier) and returns their outputs in order.
fn at_once(calls: Vec<Box<dyn FnOnce() -> Output + Send + '_>>) -> Vec<Output> {
    let start = Barrier::new(calls.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = calls
            .into_iter()
            .map(|call| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    call()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Nothing of the pod anywhere, and no file, directory or lock in the config dir.
#[track_caller]
fn assert_clean(fx: &Fixture, round: impl std::fmt::Display) {
    fx.assert_nothing_left();
    let left = fx.node.leftovers();
    assert!(
        left.is_empty(),
        "round {round}: {left:?}\n{}",
        fx.node.warnings()
    );
}

fn one_vmi() -> Fixture {
    Fixture::new(vec![VmiSpec::new("default", 1)])
}

// ---------------------------------------------------------------- namespaces

/// A path to the test's own network namespace (its private node's) under /run/netns, as a
/// runtime would hand one over: removed (unmounted) on drop.
struct HostNetnsLink(String);

impl HostNetnsLink {
    fn new() -> HostNetnsLink {
        enter_node();
        let name = format!("ck8s-host-{}", tag());
        sh("ip", &["netns", "attach", &name, &thread_id().to_string()]);
        HostNetnsLink(name)
    }
}

impl Drop for HostNetnsLink {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

#[test]
fn the_plugins_own_namespace_and_non_network_namespaces_are_refused_before_anything() {
    // Every agent request hangs: a plugin that asked the agent anything would take seconds.
    let fx = Fixture::with_sim(
        vec![VmiSpec::new("default", 1)],
        &[
            "--hang",
            "GET:/vm",
            "--hang",
            "POST:/vm",
            "--hang",
            "DELETE:/vm",
        ],
    );
    let host = HostNetnsLink::new();
    let ifname = format!("ck8s{}", &tag()[..8]);
    let own = [
        "/proc/self/ns/net".to_string(),
        "/proc/thread-self/ns/net".to_string(),
        format!("/proc/{}/ns/net", thread_id()),
        format!("/run/netns/{}", host.0),
    ];
    let not_net = ["/proc/self/ns/mnt", "/proc/self/ns/uts"];
    for (netns, words) in own
        .iter()
        .map(|p| (p.as_str(), "the network namespace this plugin runs in"))
        .chain(not_net.iter().map(|p| (*p, "not a network namespace")))
    {
        let out = fx
            .node
            .cni("ADD")
            .container(&fx.cid)
            .netns(netns)
            .ifname(&ifname)
            .args(&fx.args())
            .run(&fx.conf("default"));
        assert_eq!(out.code(), 4, "{netns}: {}", out.stdout);
        assert!(
            out.msg().contains("CNI_NETNS") && out.msg().contains(words),
            "{netns}: {}",
            out.msg()
        );
        assert_eq!(fx.sim.requests(), 0, "{netns}: the agent was asked");
        assert!(
            !host_link_exists(&ifname),
            "{netns}: {ifname} was created on the host"
        );
        assert!(!fx.node.ports_dir().exists(), "{netns}: state was written");
    }
    assert_eq!(fx.sim.ports(), []);
}

// ---------------------------------------------------------------- races on one pod

#[test]
fn three_dels_of_a_pods_last_attachment_at_once_leave_nothing() {
    let fx = one_vmi();
    for round in 0..20 {
        fx.add("eth0", "default");
        let del = || fx.del("eth0", "default");
        for out in at_once(vec![Box::new(del), Box::new(del), Box::new(del)]) {
            out.assert_ok();
        }
        assert_clean(&fx, round);
    }
}

#[test]
fn gc_racing_the_last_del_leaves_nothing() {
    let fx = one_vmi();
    for round in 0..20 {
        fx.add("eth0", "default");
        // Half the rounds GC releases the sandbox too; the other half it keeps it.
        let valid = match round % 2 {
            0 => json!([]),
            _ => json!([{"containerID": fx.cid, "ifname": "eth0"}]),
        };
        let outs = at_once(vec![
            Box::new(|| fx.del("eth0", "default")),
            Box::new(|| fx.node.gc(valid.clone())),
        ]);
        for out in outs {
            out.assert_ok();
        }
        assert_clean(&fx, round);
    }
}

#[test]
fn no_op_del_and_check_racing_the_last_del_leave_nothing() {
    let fx = one_vmi();
    for round in 0..20 {
        let r = fx.add("eth0", "default");
        let outs = at_once(vec![
            Box::new(|| fx.del("eth0", "default")),
            // Another sandbox's late DEL, and a DEL of an interface the pod never had.
            Box::new(|| fx.call_in(&uuid(), &fx.ns.path(), "DEL", "eth0", &fx.conf("default"))),
            Box::new(|| fx.del("net9", "default")),
            Box::new(|| fx.check("eth0", "default", &r)),
        ]);
        for out in &outs[..3] {
            out.assert_ok();
        }
        // CHECK passes before the DEL and finds nothing after it.
        let check = &outs[3];
        assert!(check.ok || check.code() == 103, "{check:?}");
        assert_clean(&fx, round);
    }
}

#[test]
fn two_adds_of_one_attachment_at_once_never_undo_each_other() {
    // Outside the CNI contract, but a runtime retrying after a timeout comes close: the second
    // ADD waits for the first and takes its attachment over; the interface always ends up
    // whole, recorded and registered, and one DEL removes all of it.
    let fx = one_vmi();
    let vmi = &fx.pod.vmis[0];
    for round in 0..20 {
        let add = || fx.call("ADD", "eth0", &fx.conf("default"));
        let outs = at_once(vec![Box::new(add), Box::new(add)]);
        assert!(outs.iter().all(|o| o.ok), "round {round}: {outs:?}");
        assert_eq!(fx.ns.ifnames(), ["eth0", "lo"], "round {round}");
        assert_eq!(fx.ns.mac("eth0"), vmi.mac, "round {round}");
        assert_eq!(fx.ns.addrs("eth0"), [vmi.addr()], "round {round}");
        assert_eq!(
            fx.node.state_files(&fx.pod),
            std::slice::from_ref(&vmi.uuid)
        );
        let tap = host_ifname(&vmi.uuid);
        assert_eq!(
            fx.sim.ports(),
            [(vmi.uuid.clone(), tap, "eth0".to_string())],
            "round {round}"
        );
        fx.check("eth0", "default", &outs[1].json()).assert_ok();
        fx.del("eth0", "default").assert_ok();
        assert_clean(&fx, round);
    }
}

#[test]
fn add_racing_del_on_one_pod_leaves_nothing_after_the_final_dels() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let eth0 = &fx.pod.vmis[0];
    for round in 0..20 {
        fx.add("eth0", "default");
        // Another attachment's ADD against the pod's last attachment's DEL.
        let outs = at_once(vec![
            Box::new(|| fx.call("ADD", "net1", &fx.conf("net-a"))),
            Box::new(|| fx.del("eth0", "default")),
        ]);
        outs[0].assert_ok();
        outs[1].assert_ok();
        assert_eq!(fx.ns.ifnames(), ["lo", "net1"], "round {round}");
        // An attachment's ADD against its own DEL: a DEL that lands during the ADD fails it,
        // and the failed ADD leaves nothing of eth0, before any further DEL.
        let outs = at_once(vec![
            Box::new(|| fx.call("ADD", "eth0", &fx.conf("default"))),
            Box::new(|| fx.del("eth0", "default")),
        ]);
        outs[1].assert_ok();
        if !outs[0].ok {
            assert_eq!(outs[0].code(), 102, "{:?}", outs[0]);
            assert_eq!(fx.ns.ifnames(), ["lo", "net1"], "round {round}");
            assert!(!host_link_exists(&host_ifname(&eth0.uuid)), "round {round}");
            assert!(!fx.node.state_files(&fx.pod).contains(&eth0.uuid));
            assert!(
                !fx.sim.ports().iter().any(|p| p.0 == eth0.uuid),
                "round {round}"
            );
        }
        fx.del("eth0", "default").assert_ok();
        fx.del("net1", "net-a").assert_ok();
        assert_clean(&fx, round);
    }
}

#[test]
fn del_during_an_add_that_is_then_killed_removes_what_that_add_built() {
    // A runtime gave up on an ADD and sent DEL; the ADD, stalled, is killed only after DEL
    // came. DEL waits for the ADD to end, then removes the interface the ADD created.
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1).with("ip-delay-ms", json!(60_000)),
    ]);
    // The DEL waits for the stopped ADD within its own deadline: 30 s, not a race with the
    // test's own steps on a busy machine.
    fx.node.roomy();
    let fx = fx;
    let vmi = &fx.pod.vmis[0];
    let tmp = TempDir::new();
    let pid_file = tmp.0.join("add.pid");
    // Execs the plugin, as runtimes do, after saying which process it is.
    let wrapper: Vec<String> = ["sh", "-c", "echo $$ > \"$0\"; exec \"$@\""]
        .iter()
        .map(|a| a.to_string())
        .chain([pid_file.display().to_string()])
        .collect();
    let args = fx.pod.multus_args(&fx.cid);
    let ns = fx.ns.path();
    let env = fx
        .node
        .cni("ADD")
        .container(&fx.cid)
        .netns(&ns)
        .ifname("eth0")
        .args(&args)
        .environment();
    let stdin = fx.conf("default").to_string();
    let signal = |sig: &str| {
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        sh("kill", &[sig, pid.trim()]);
    };
    std::thread::scope(|s| {
        let add = s.spawn(|| run_wrapped(&wrapper, &plugin_bin(), &env, stdin.as_bytes()));
        wait_for("the ADD's veth", Duration::from_secs(10), || {
            fx.ns.ifnames().contains(&"eth0".to_string())
        });
        signal("-STOP");
        let del = s.spawn(|| fx.del("eth0", "default"));
        let locks = fx.node.ports_dir().join(".locks");
        wait_for("DEL to ask the ADD to stop", HANG, || {
            std::fs::read_dir(&locks)
                .unwrap()
                .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".stop"))
        });
        assert!(!del.is_finished(), "DEL must wait for the ADD it stopped");
        signal("-KILL");
        del.join().unwrap().assert_ok();
        assert!(!add.join().unwrap().ok);
    });
    assert!(!host_link_exists(&host_ifname(&vmi.uuid)));
    assert_clean(&fx, "after the kill");
}

// ---------------------------------------------------------------- failed ADDs

/// A tmpfs of 64 KiB (unmounted on drop), filled up.
struct FullDisk {
    dir: TempDir,
    fill: PathBuf,
}

impl FullDisk {
    fn new() -> FullDisk {
        // Mounted in the test's node: gone with it, whatever happens to the test.
        enter_node();
        let dir = TempDir::new();
        let root = dir.0.to_str().unwrap();
        sh(
            "mount",
            &["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", root],
        );
        let fill = dir.0.join("fill");
        // dd stops at ENOSPC, and says so with a failure.
        let _ = try_sh(
            "dd",
            &["if=/dev/zero", &format!("of={}", fill.display()), "bs=4k"],
        );
        FullDisk { dir, fill }
    }

    /// What the file system holds besides the filler, the state root, its locks and the
    /// node's request budget.
    fn entries(&self, state: &Path) -> Vec<String> {
        let out = sh("find", &[self.dir.0.to_str().unwrap(), "-mindepth", "1"]);
        let allowed = [
            self.fill.clone(),
            state.to_path_buf(),
            state.join(".locks"),
            state.join(".budget"),
        ];
        out.lines()
            .filter(|l| !allowed.iter().any(|a| Path::new(l) == a))
            .map(String::from)
            .collect()
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(&self.dir.0)
            .status();
    }
}

#[test]
fn a_full_disk_fails_add_with_code_5_and_leaves_no_file() {
    let disk = FullDisk::new();
    let state = disk.dir.0.join("ports");
    let mut fx = one_vmi();
    fx.set("config-dir", json!(state));
    let out = fx.call("ADD", "eth0", &fx.conf("default"));
    assert_eq!(out.code(), 5, "{}", out.stdout);
    assert!(
        out.msg().contains("No space left") && out.msg().contains(state.to_str().unwrap()),
        "{}",
        out.msg()
    );
    assert_eq!(disk.entries(&state), [] as [String; 0]);
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    assert_eq!(fx.sim.ports(), []);
    // Space comes back: the same ADD works, and its DEL leaves nothing.
    std::fs::remove_file(&disk.fill).unwrap();
    fx.add("eth0", "default");
    fx.del("eth0", "default").assert_ok();
    assert_eq!(disk.entries(&state), [] as [String; 0]);
}

#[test]
fn del_on_a_full_disk_removes_everything() {
    // Nodes fill /var: kubelet then retries the DEL of every pod forever if DEL needs space.
    // A release renames files and removes them; it writes nothing new.
    let disk = FullDisk::new();
    std::fs::remove_file(&disk.fill).unwrap();
    let state = disk.dir.0.join("ports");
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
    ]);
    fx.set("config-dir", json!(state));
    fx.add("eth0", "default");
    fx.add("net1", "net-a");
    fx.add("net2", "net-a");
    // Full: not a byte more, also for the DEL of one attachment of three, whose siblings must
    // be registered again.
    let _ = try_sh(
        "dd",
        &[
            "if=/dev/zero",
            &format!("of={}", disk.fill.display()),
            "bs=4k",
        ],
    );
    let probe = disk.dir.0.join("probe");
    assert!(std::fs::write(&probe, "x").is_err(), "not full");
    std::fs::remove_file(&probe).unwrap();
    fx.del("net1", "net-a").assert_ok();
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo", "net2"]);
    let mut registered: Vec<String> = fx.sim.ports().into_iter().map(|p| p.2).collect();
    registered.sort();
    assert_eq!(registered, ["eth0", "net2"], "the siblings stay registered");
    for ifname in ["net2", "eth0"] {
        let network = if ifname == "eth0" { "default" } else { "net-a" };
        fx.del(ifname, network).assert_ok();
    }
    fx.assert_nothing_left();
    assert_eq!(disk.entries(&state), [] as [String; 0]);
}

#[test]
fn add_for_a_network_the_pod_does_not_have_leaves_no_pod_directory() {
    let fx = one_vmi();
    let out = fx.call("ADD", "net1", &fx.conf("no-such-net"));
    assert_eq!(out.code(), 101, "{}", out.stdout);
    assert_clean(&fx, 0);
}

// ---------------------------------------------------------------- a hostile state directory

/// The pod's state directory (not created).
fn pod_dir(fx: &Fixture) -> PathBuf {
    fx.node.ports_dir().join(fx.pod.vm_name())
}

fn symlink(target: &Path, link: &Path) {
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, link).unwrap();
}

#[test]
fn a_pod_directory_that_is_a_symlink_is_refused_and_nothing_goes_through_it() {
    let fx = one_vmi();
    let outside = TempDir::new();
    symlink(&outside.0, &pod_dir(&fx));
    let out = fx.call("ADD", "eth0", &fx.conf("default"));
    assert_eq!(out.code(), 5, "{}", out.stdout);
    assert!(out.msg().contains("not a directory"), "{}", out.msg());
    // Nothing of the pod, and nothing written through the link.
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    assert_eq!(fx.sim.ports(), []);
    // DEL and GC see no pod of theirs there and leave the link alone.
    fx.del("eth0", "default").assert_ok();
    fx.node.gc(json!([])).assert_ok();
    assert!(pod_dir(&fx).is_symlink());
    assert_eq!(std::fs::read_dir(&outside.0).unwrap().count(), 0);
}

#[test]
fn a_temp_file_that_is_a_symlink_is_removed_never_written_through() {
    let fx = one_vmi();
    let outside = TempDir::new();
    let precious = outside.0.join("precious");
    std::fs::write(&precious, "precious").unwrap();
    let tmp = pod_dir(&fx).join(format!(".{}.tmp", fx.pod.vmis[0].uuid));
    symlink(&precious, &tmp);
    let r = fx.add("eth0", "default");
    assert!(!tmp.is_symlink(), "the stale temp file stayed");
    fx.check("eth0", "default", &r).assert_ok();
    fx.del("eth0", "default").assert_ok();
    assert_clean(&fx, 0);
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "precious");
}

#[test]
fn a_dangling_lock_symlink_never_creates_its_target() {
    let fx = one_vmi();
    let outside = TempDir::new();
    let target = outside.0.join("created");
    // The lock of this version's layout, and the one of the layout before (in the pod's
    // directory).
    let lock = fx.node.ports_dir().join(".locks").join(fx.pod.vm_name());
    symlink(&target, &lock);
    let out = fx.call("ADD", "eth0", &fx.conf("default"));
    assert_eq!(out.code(), 5, "{}", out.stdout);
    assert!(out.msg().contains("symbolic link"), "{}", out.msg());
    assert!(!target.exists());
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    // The operator removes it as `inspect` says; the old layout's lock is ignored.
    std::fs::remove_file(&lock).unwrap();
    let old = pod_dir(&fx).join(".lock");
    symlink(&target, &old);
    fx.add("eth0", "default");
    fx.del("eth0", "default").assert_ok();
    assert!(!target.exists());
    assert!(old.is_symlink(), "not this plugin's: left alone");
}

/// A pod with eth0 up, whose state directory also holds `make(path)` under the name of its
/// second VMI, and a second pod on the same node.
fn with_odd_state_file(make: impl FnOnce(&Path)) -> (Fixture, Fixture) {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    fx.add("eth0", "default");
    make(&pod_dir(&fx).join(&fx.pod.vmis[1].uuid));
    // The other pod shares the node: its state goes in the same directory.
    let mut other = Fixture::with_pod(PodSpec::new(vec![VmiSpec::new("default", 3)]), &[]);
    other.set("config-dir", json!(fx.node.ports_dir()));
    (fx, other)
}

/// Every call that reads the odd file finishes at once: ADD of the pod (the VMI it names counts
/// as held), DEL of the pod's attachments, ADD and DEL of another pod, GC; the file stays.
#[track_caller]
fn odd_state_file_is_left_alone(fx: &Fixture, other: &Fixture, odd: &Path) {
    let quick = |what: &str, f: &dyn Fn() -> Output| {
        let started = Instant::now();
        let out = f();
        assert!(
            started.elapsed() < HANG,
            "{what} took {:?}",
            started.elapsed()
        );
        out
    };
    let out = quick("ADD net1", &|| fx.call("ADD", "net1", &fx.conf("net-a")));
    assert_eq!(
        out.code(),
        101,
        "the odd file holds net-a's only VMI: {}",
        out.stdout
    );
    quick("ADD of another pod", &|| {
        other.call("ADD", "eth0", &other.conf("default"))
    })
    .assert_ok();
    quick("DEL of another pod", &|| other.del("eth0", "default")).assert_ok();
    quick("GC", &|| {
        fx.node
            .gc(json!([{"containerID": fx.cid, "ifname": "eth0"}]))
    })
    .assert_ok();
    quick("DEL eth0", &|| fx.del("eth0", "default")).assert_ok();
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    assert!(
        odd.symlink_metadata().is_ok(),
        "{} was removed",
        odd.display()
    );
}

#[test]
fn a_state_file_that_is_a_fifo_hangs_nothing() {
    let (fx, other) = with_odd_state_file(|p| {
        sh("mkfifo", &[p.to_str().unwrap()]);
    });
    let odd = pod_dir(&fx).join(&fx.pod.vmis[1].uuid);
    odd_state_file_is_left_alone(&fx, &other, &odd);
}

#[test]
fn a_state_file_that_links_to_dev_zero_is_never_read() {
    let (mut fx, mut other) = with_odd_state_file(|p| symlink(Path::new("/dev/zero"), p));
    // Reading /dev/zero into memory takes seconds to reach this limit (the plugin then sees
    // an out-of-memory error, not an abort): the calls' bound catches it, and the limit keeps
    // the machine safe from a plugin that reads on.
    let limit = ["prlimit", "--as=4294967296", "--"]
        .map(String::from)
        .to_vec();
    fx.node.wrapper = limit.clone();
    other.node.wrapper = limit;
    let odd = pod_dir(&fx).join(&fx.pod.vmis[1].uuid);
    odd_state_file_is_left_alone(&fx, &other, &odd);
}

// ---------------------------------------------------------------- the agent's word

#[test]
fn an_index_count_of_four_billion_is_refused_with_code_6_under_a_memory_limit() {
    // The agent's answer, as an honest agent gives it, with the index annotation rewritten.
    let mut fx = one_vmi();
    let files = TempDir::new();
    let path = format!("/vm-cfg/{}", fx.pod.vm_name());
    let mut cfg = fx.sim.get(&path);
    for a in cfg[0]["annotations"].as_array_mut().unwrap() {
        if a.as_str().unwrap().starts_with("{index:") {
            *a = json!("{index:0/4294967295}");
        }
    }
    let file = files.0.join("vm-cfg.json");
    std::fs::write(&file, cfg.to_string()).unwrap();
    fx.restart_agent(&["--respond", &format!("GET:{path}:200:{}", file.display())]);
    fx.node.wrapper = ["prlimit", "--as=268435456", "--"]
        .map(String::from)
        .to_vec();
    let out = fx.call("ADD", "eth0", &fx.conf("default"));
    assert_eq!(out.code(), 6, "{out:?}");
    let msg = out.msg();
    assert!(
        msg.contains("whose index annotation is not k/N") && !msg.contains("4294967295"),
        "{msg}"
    );
    assert_clean(&fx, 0);
}

// ---------------------------------------------------------------- a briefly busy agent

#[test]
fn check_and_the_final_deregistration_ride_out_a_briefly_busy_agent() {
    // The agent keeps its ports in a directory, so that they survive its restart.
    let ports = TempDir::new();
    let keep = ["--state-dir", ports.0.to_str().unwrap()];
    let mut fx = Fixture::with_sim(vec![VmiSpec::new("default", 1)], &keep);
    let r: Value = fx.add("eth0", "default");
    // The agent answers 500 to the next two requests of each kind, then recovers.
    let flaky = ["--flaky", "GET:/vm/:2", "--flaky", "DELETE:/vm/:2"];
    fx.restart_agent(&[&keep[..], &flaky[..]].concat());
    assert_eq!(fx.sim.ports().len(), 1, "the port survived the restart");
    fx.check("eth0", "default", &r).assert_ok();
    fx.del("eth0", "default").assert_ok();
    assert_clean(&fx, 0);
}
