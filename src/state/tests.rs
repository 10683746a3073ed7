use super::*;
use crate::ids::{ContainerId, IfName, VmName, VmUuid, VmiUuid, VnUuid};
use crate::vmi::Claim;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};

/// A deadline no test reaches.
fn later() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn tempdir(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("ck8s-state-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&p);
    p
}

fn id(vmi: &str) -> VmiUuid {
    VmiUuid::parse(vmi).unwrap()
}

fn record(vmi: &str, container_id: &str, ifname: &str) -> Record {
    Record {
        time: "0".into(),
        container_id: ContainerId::parse(container_id).unwrap(),
        vm_uuid: VmUuid::parse("40936d96-cf0e-11e8-9892-002590aaa964").unwrap(),
        vm_name: VmName::parse(POD).unwrap(),
        host_ifname: IfName::parse(crate::kernel::names::host_ifname(vmi)).unwrap(),
        ifname: IfName::parse(ifname).unwrap(),
        netns: "/run/netns/x".into(),
        vn_uuid: VnUuid::parse("f95af4cc-e4ba-44c8-9936-269d891e0ee9").unwrap(),
        vmi_uuid: VmiUuid::parse(vmi).unwrap(),
        state_version: STATE_VERSION.into(),
        network: "net-a".into(),
        mac: crate::vmi::Mac::parse("02:00:00:00:00:01"),
        default_gw: false,
        mtu: String::new(),
        claimed_boot: String::new(),
        claimed_uptime_ms: String::new(),
        vlan: None,
        route: Route::Vm,
        pod_uid: None,
        device_info: None,
        written_before_boot: false,
    }
}

const POD: &str = "k8s__default__p";

fn vm(name: &str) -> VmName {
    VmName::parse(name).unwrap()
}
const A: &str = "b86ac068-cf0e-11e8-b196-002590aaa964";
const B: &str = "b86ac068-cf0e-11e8-b196-002590aaa965";

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn write_read_remove_close_and_permissions() {
    let root = tempdir("rw");
    let state = StateDir::open(&root).unwrap();
    let mut pod = state.lock_pod(&vm(POD), later()).unwrap();
    assert!(!root.join(POD).exists(), "no directory before a file");
    pod.write(&record(A, "c1", "net1")).unwrap();
    pod.write(&record(B, "c1", "net2")).unwrap();
    let files = pod.files().unwrap();
    assert_eq!(
        files.records,
        vec![record(A, "c1", "net1"), record(B, "c1", "net2")]
    );
    assert!(files.unreadable.is_empty());
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(pod.path()), 0o700);
    assert_eq!(mode(&pod.path().join(A)), 0o600);
    // No temp files left behind; the agent's own keys, as strings.
    assert_eq!(names(pod.path()), [A, B]);
    let raw: serde_json::Value =
        serde_json::from_slice(&fs::read(pod.path().join(A)).unwrap()).unwrap();
    assert_eq!(raw["vm-id"], "c1");
    assert_eq!(raw["default-gw"], "false");
    pod.remove(&id(A)).unwrap();
    pod.remove(&id(A)).unwrap();
    assert_eq!(names(pod.path()), [B]);
    pod.close().unwrap();
    assert_eq!(names(&root.join(POD)), [B], "a pod with a file stays");
    assert_eq!(names(&root.join(LOCKS)), [POD], "and so does its lock");
    let pod = state.lock_pod(&vm(POD), later()).unwrap();
    pod.remove(&id(B)).unwrap();
    pod.close().unwrap();
    assert!(!root.join(POD).exists());
    assert!(
        names(&root.join(LOCKS)).is_empty(),
        "the lock goes with the pod"
    );
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_call_with_nothing_to_write_leaves_no_directory() {
    let root = tempdir("noop");
    let state = StateDir::open(&root).unwrap();
    state.lock_pod(&vm(POD), later()).unwrap().close().unwrap();
    assert_eq!(names(&root), [LOCKS]);
    assert!(names(&root.join(LOCKS)).is_empty());
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn temp_files_of_killed_writers_go_when_the_pod_is_locked() {
    let root = tempdir("tmp");
    let state = StateDir::open(&root).unwrap();
    let mut pod = state.lock_pod(&vm(POD), later()).unwrap();
    pod.write(&record(A, "c1", "net1")).unwrap();
    drop(pod);
    fs::write(root.join(POD).join(format!(".{B}.tmp")), "{ half").unwrap();
    assert_eq!(
        state.read_pod(&vm(POD)).unwrap().temps,
        [format!(".{B}.tmp")]
    );
    let pod = state.lock_pod(&vm(POD), later()).unwrap();
    assert_eq!(names(pod.path()), [A]);
    fs::remove_dir_all(&root).unwrap();
}

/// The boot time as `written_before_boot` computes it, give or take microseconds.
fn boot() -> std::time::SystemTime {
    let up = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
    std::time::SystemTime::now() - std::time::Duration::new(up.tv_sec() as u64, up.tv_nsec() as u32)
}

#[test]
fn what_a_power_loss_tore_goes_when_the_pod_is_locked_and_nothing_else() {
    let (c, d, e) = (
        "b86ac068-cf0e-11e8-b196-002590aaa966",
        "b86ac068-cf0e-11e8-b196-002590aaa967",
        "b86ac068-cf0e-11e8-b196-002590aaa968",
    );
    let root = tempdir("torn");
    let state = StateDir::open(&root).unwrap();
    state
        .lock_pod(&vm(POD), later())
        .unwrap()
        .write(&record(A, "c1", "eth0"))
        .unwrap();
    let dir = root.join(POD);
    let before = boot() - std::time::Duration::from_secs(2);
    let after = boot() + std::time::Duration::from_secs(2);
    let future = format!(r#"{{"vmi-uuid": "{c}", "contrail-k8s-cni-state": "9"}}"#);
    let reserved = |v: &str| format!(".{v}.reserved");
    // (name, content, last written): empty, torn (zeros, as XFS shows a lost write), half.
    let files = [
        (B.to_string(), String::new(), before),
        (c.to_string(), future, before),
        (d.to_string(), String::new(), after),
        (reserved(d), "\0\0\0".to_string(), before),
        (reserved(e), "{ half".to_string(), after),
        (e.to_string(), "{ half".to_string(), before),
    ];
    for (name, content, when) in &files {
        fs::write(dir.join(name), content).unwrap();
        let f = fs::File::options()
            .write(true)
            .open(dir.join(name))
            .unwrap();
        f.set_modified(*when).unwrap();
    }
    let mut torn = vec![B.to_string(), e.to_string(), reserved(d)];
    torn.sort();
    let seen = state.read_pod(&vm(POD)).unwrap();
    assert_eq!(seen.torn, torn, "reported without the lock");
    let unreadable: Vec<&str> = seen
        .unreadable
        .iter()
        .map(|u| u.vmi_uuid.as_str())
        .collect();
    assert_eq!(
        unreadable,
        [c, d],
        "a future version's file, a torn one of this boot"
    );
    let pod = state.lock_pod(&vm(POD), later()).unwrap();
    let files = pod.files().unwrap();
    assert!(files.torn.is_empty());
    let claimed: Vec<String> = files.claims().iter().map(|c| c.vmi.to_string()).collect();
    assert_eq!(claimed, [A, c, d], "what a power loss tore holds no VMI");
    let mut left = vec![A.to_string(), c.to_string(), d.to_string(), reserved(e)];
    left.sort();
    assert_eq!(names(pod.path()), left);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn agent_written_corrupt_and_future_files() {
    let root = tempdir("corrupt");
    let state = StateDir::open(&root).unwrap();
    let mut pod = state.lock_pod(&vm(POD), later()).unwrap();
    pod.write(&record(B, "c1", "net1")).unwrap();
    // A file the agent wrote from a legacy plugin's POST: no keys of ours.
    let agent = serde_json::json!({"time": "t", "vm-id": "c0", "vm-uuid": "40936d96-cf0e-11e8-9892-002590aaa964",
        "vm-name": POD, "host-ifname": "tapeth0fe3edca", "vm-ifname": "eth0",
        "vm-namespace": "/proc/1/ns/net", "vn-uuid": "f95af4cc-e4ba-44c8-9936-269d891e0ee9", "vmi-uuid": A,
        "author": "/usr/bin/contrail-vrouter-agent"});
    fs::write(pod.path().join(A), agent.to_string()).unwrap();
    fs::write(pod.path().join("not-a-uuid"), "x").unwrap();
    let files = pod.files().unwrap();
    assert_eq!(files.records.len(), 2);
    assert_eq!(
        files.records[0].claim(),
        Claim {
            vmi: id(A),
            holder: Some((
                ContainerId::parse("c0").unwrap(),
                IfName::parse("eth0").unwrap()
            )),
        }
    );
    assert!(files.unreadable.is_empty());
    let mut future = record(B, "c1", "net1");
    future.state_version = "9".into();
    pod.write(&future).unwrap();
    let bad = pod.files().unwrap().unreadable;
    assert!(bad[0].why.contains("state version"), "{}", bad[0].why);
    // Still a port the agent would reload: it stays registered (see ledger::settle).
    assert_eq!(bad[0].port.as_ref().unwrap()["vmi-uuid"], B);
    fs::write(pod.path().join(B), "{ torn").unwrap();
    let bad = pod.files().unwrap().unreadable;
    assert!(bad[0].port.is_none());
    drop(pod);
    let c0 = ContainerId::parse("c0").unwrap();
    let eth = |n: &str| IfName::parse(n).unwrap();
    assert_eq!(
        state.find_pod(&c0, Some(&eth("eth0"))).unwrap(),
        Some(vm(POD))
    );
    assert_eq!(state.find_pod(&c0, Some(&eth("eth1"))).unwrap(), None);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn hostile_entries_are_refused_not_followed_and_never_hang() {
    let root = tempdir("hostile");
    let outside = tempdir("hostile-outside");
    fs::create_dir_all(&outside).unwrap();
    let state = StateDir::open(&root).unwrap();
    // A pod directory that is a symlink elsewhere: not a pod, and never written through.
    symlink(&outside, root.join(POD)).unwrap();
    assert!(state.pods().unwrap().is_empty());
    assert!(!state.has_pod(&vm(POD)).unwrap());
    assert_eq!(state.strays().unwrap(), [POD]);
    let err = match state.lock_pod(&vm(POD), later()) {
        Ok(mut pod) => pod.write(&record(A, "c1", "net1")).unwrap_err(),
        Err(e) => e,
    };
    assert!(err.to_string().contains("not a directory"), "{err}");
    assert!(names(&outside).is_empty(), "written outside config-dir");
    fs::remove_file(root.join(POD)).unwrap();

    // A temp file that is a symlink: its target is not overwritten.
    let target = outside.join("precious");
    fs::write(&target, "keep").unwrap();
    let mut pod = state.lock_pod(&vm(POD), later()).unwrap();
    pod.write(&record(B, "c1", "net1")).unwrap();
    symlink(&target, root.join(POD).join(format!(".{A}.tmp"))).unwrap();
    pod.write(&record(A, "c1", "net2")).unwrap();
    assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
    drop(pod);

    // A dangling lock symlink: its target is not created.
    let planted = outside.join("planted");
    symlink(&planted, root.join(LOCKS).join("k8s__default__q")).unwrap();
    assert!(state.lock_pod(&vm("k8s__default__q"), later()).is_err());
    assert!(!planted.exists());

    // A FIFO and a symlink to /dev/zero as state files: unreadable at once, no hang.
    let dir = root.join(POD);
    fs::remove_file(dir.join(A)).unwrap();
    fs::remove_file(dir.join(B)).unwrap();
    nix::unistd::mkfifo(&dir.join(A), mode(0o600)).unwrap();
    symlink("/dev/zero", dir.join(B)).unwrap();
    let started = Instant::now();
    let files = state.read_pod(&vm(POD)).unwrap();
    // Neither is read: a FIFO's read would wait forever, /dev/zero's would never end.
    assert!(started.elapsed() < Duration::from_secs(30));
    let why: Vec<&str> = files.unreadable.iter().map(|u| u.why.as_str()).collect();
    assert_eq!(
        why,
        [
            "a FIFO, not a regular file",
            "a symbolic link, not a regular file"
        ]
    );
    // An oversized file.
    fs::remove_file(dir.join(B)).unwrap();
    fs::write(dir.join(B), vec![b' '; MAX_FILE as usize + 1]).unwrap();
    let files = state.read_pod(&vm(POD)).unwrap();
    assert!(files.unreadable[1].why.contains("larger than"));
    fs::remove_dir_all(&root).unwrap();
    fs::remove_dir_all(&outside).unwrap();
}

#[test]
fn a_lock_held_past_the_deadline_is_refused_and_one_removed_is_taken_fresh() {
    let root = tempdir("lock");
    let state = StateDir::open(&root).unwrap();
    let first = state.lock_pod(&vm(POD), later()).unwrap();
    // A holder that never lets go (stopped, stuck) holds nobody beyond their deadline.
    let started = Instant::now();
    let busy = state.lock_pod(&vm(POD), started + Duration::from_millis(50));
    let e = busy.err().expect("the lock is held");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert!(e.to_string().contains(&format!("{LOCKS}/{POD}")), "{e}");
    assert!(started.elapsed() >= Duration::from_millis(50));
    // The holder removes the lock file while another call waits for it: the waiter locks a
    // fresh file, never the removed one (whichever it had opened meanwhile).
    let root2 = root.clone();
    let waiter = std::thread::spawn(move || {
        let state = StateDir::open(&root2).unwrap();
        let mut pod = state.lock_pod(&vm(POD), later()).unwrap();
        pod.write(&record(A, "c2", "net1")).unwrap();
    });
    first.close().unwrap();
    waiter.join().unwrap();
    let pod = state.lock_pod(&vm(POD), later()).unwrap();
    assert_eq!(pod.files().unwrap().records.len(), 1);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn released_files_go_pending_then_settle_and_reservations_hold_their_vmi() {
    let root = tempdir("release");
    let state = StateDir::open(&root).unwrap();
    let mut pod = state.lock_pod(&vm(POD), later()).unwrap();
    let (a, b) = (record(A, "c1", "net1"), record(B, "c1", "net2"));
    pod.write(&a).unwrap();
    pod.write(&b).unwrap();
    pod.mark_released(&id(A), Then::Gone).unwrap();
    pod.mark_released(&id(B), Then::Reserved).unwrap();
    assert_eq!(
        names(pod.path()),
        [format!(".{A}.release"), format!(".{B}.reserve")]
    );
    let files = pod.files().unwrap();
    assert!(files.records.is_empty());
    assert_eq!(
        files.reserved,
        std::slice::from_ref(&b),
        "pending, it already holds its VMI"
    );
    let pending: Vec<(&str, Then, bool)> = files
        .pending
        .iter()
        .map(|p| (p.vmi_uuid.as_str(), p.then, p.record.is_some()))
        .collect();
    assert_eq!(pending, [(A, Then::Gone, true), (B, Then::Reserved, true)]);
    assert_eq!(files.claims().len(), 1, "a release claims nothing");
    for p in &files.pending {
        pod.settled(p).unwrap();
    }
    assert_eq!(names(pod.path()), [format!(".{B}.reserved")]);
    let files = pod.files().unwrap();
    assert_eq!(files.reserved, std::slice::from_ref(&b));
    assert!(files.pending.is_empty());
    // The attachment's retry takes its reservation back.
    pod.write(&b).unwrap();
    assert_eq!(names(pod.path()), [B]);
    // One never registered becomes a reservation at once; dropped, it is gone.
    pod.reserve(&id(B)).unwrap();
    pod.drop_reservation(&id(B)).unwrap();
    assert!(names(pod.path()).is_empty());
    // A pending reservation dropped becomes a pending release.
    pod.write(&b).unwrap();
    pod.mark_released(&id(B), Then::Reserved).unwrap();
    pod.drop_reservation(&id(B)).unwrap();
    assert_eq!(names(pod.path()), [format!(".{B}.release")]);
    fs::write(pod.path().join(format!(".{B}.release")), "").unwrap();
    assert!(
        pod.files().unwrap().pending[0].record.is_none(),
        "torn by a power loss"
    );
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_pending_deregistration_of_version_0_1_0_is_read() {
    let root = tempdir("legacy");
    let state = StateDir::open(&root).unwrap();
    let mut pod = state.lock_pod(&vm(POD), later()).unwrap();
    pod.write(&record(A, "c1", "net1")).unwrap();
    let vm = "40936d96-cf0e-11e8-9892-002590aaa964";
    // Its vm-uuid names a request path: anything but a uuid is no marker.
    for hostile in [
        format!("{vm}\r\nX-Injected: 1"),
        vm.to_uppercase(),
        "../x".into(),
    ] {
        fs::write(pod.path().join(".resync"), hostile).unwrap();
        assert_eq!(pod.files().unwrap().legacy_resync, None);
    }
    fs::write(pod.path().join(".resync"), format!("{vm}\n")).unwrap();
    assert_eq!(
        pod.files()
            .unwrap()
            .legacy_resync
            .as_ref()
            .map(VmUuid::as_str),
        Some(vm)
    );
    pod.clear_legacy_resync().unwrap();
    assert_eq!(names(pod.path()), [A]);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn records_whose_identifiers_break_the_rules_are_unreadable() {
    let root = tempdir("names");
    let state = StateDir::open(&root).unwrap();
    let mut pod = state.lock_pod(&vm(POD), later()).unwrap();
    let vm = "40936d96-cf0e-11e8-9892-002590aaa964";
    let injected = format!("{vm} HTTP/1.1\r\nX-Injected: 1");
    // Makes the pod's directory, and is replaced by each case.
    pod.write(&record(A, "c1", "net1")).unwrap();
    for (key, value) in [
        ("vm-uuid", injected.as_str()),
        ("vm-uuid", "40936D96-CF0E-11E8-9892-002590AAA964"),
        ("vn-uuid", "../../x"),
        ("host-ifname", "tap\r\nX-Injected"),
        ("host-ifname", "a-name-far-too-long"),
        ("vm-ifname", "eth0/x"),
        ("vm-ifname", ""),
        ("vm-id", "../etc"),
        ("vm-id", "c1\nX-Injected: 1"),
        ("vm-name", "k8s__default__p/../q"),
        ("mac-address", "01:00:5e:00:00:01"),
        ("mac-address", "02:00:00:00:00:01\r\nX-Injected: 1"),
    ] {
        let mut raw = serde_json::to_value(record(A, "c1", "net1")).unwrap();
        raw[key] = value.into();
        fs::write(pod.path().join(A), raw.to_string()).unwrap();
        let files = pod.files().unwrap();
        assert!(files.records.is_empty(), "{key} {value:?} was read");
        let why = &files.unreadable[0].why;
        assert!(why.contains(key) && !why.contains("Injected"), "{why}");
        // The same as a reservation or a pending release: no record either.
        fs::rename(
            pod.path().join(A),
            pod.path().join(format!(".{A}.reserved")),
        )
        .unwrap();
        assert!(pod.files().unwrap().reserved.is_empty());
        fs::rename(
            pod.path().join(format!(".{A}.reserved")),
            pod.path().join(format!(".{A}.release")),
        )
        .unwrap();
        assert!(pod.files().unwrap().pending[0].record.is_none());
        fs::remove_file(pod.path().join(format!(".{A}.release"))).unwrap();
    }
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn stale_locks_are_swept_and_held_ones_kept() {
    let root = tempdir("sweep");
    let state = StateDir::open(&root).unwrap();
    let held = state
        .lock_attachment(
            &vm(POD),
            &ContainerId::parse("c1").unwrap(),
            "net1",
            later(),
        )
        .unwrap();
    fs::write(root.join(LOCKS).join("k8s__default__gone"), "").unwrap();
    let mut live = state.lock_pod(&vm("k8s__default__live"), later()).unwrap();
    live.write(&record(A, "c1", "net1")).unwrap();
    drop(live);
    assert_eq!(state.stale_locks(false).unwrap(), ["k8s__default__gone"]);
    assert_eq!(state.sweep_locks().unwrap(), ["k8s__default__gone"]);
    assert_eq!(
        names(&root.join(LOCKS)).len(),
        2,
        "the held and the live pod's"
    );
    held.remove().unwrap();
    assert_eq!(names(&root.join(LOCKS)), ["k8s__default__live"]);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_records_mac_is_checked_and_written_as_the_agent_writes_it() {
    let r = record(A, "c1", "net1");
    let mut v = r.port();
    assert_eq!(v["mac-address"], "02:00:00:00:00:01");
    // The agent's own files may spell it in capitals; absent or empty is none.
    v["mac-address"] = "02:AB:00:00:00:01".into();
    let back: Record = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(back.mac, crate::vmi::Mac::parse("02:ab:00:00:00:01"));
    v["mac-address"] = "".into();
    let back: Record = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(back.mac, None);
    assert!(back.port().get("mac-address").is_none());
}

#[test]
fn a_record_without_a_route_was_registered_through_post_vm() {
    let r = record(A, "c1", "net1");
    assert_eq!(r.route, Route::Vm);
    // Written as before: no route key for /vm records...
    let v = r.port();
    assert!(v.get("port-route").is_none(), "{v}");
    let back: Record = serde_json::from_value(v).unwrap();
    assert_eq!(back.route, Route::Vm);
    // ...and a /port record says so, as a string like every value in these files.
    let mut p = r.clone();
    p.route = Route::Port;
    let v = p.file_json();
    assert_eq!(v["port-route"], "port");
    // Its file is no POST /vm body: without host-ifname, the agent's reload at its start
    // refuses it rather than make the port an AF_PACKET one.
    assert!(v.get("host-ifname").is_none(), "{v}");
    assert_eq!(v["system-name"], r.host_ifname.as_str());
    let back: Record = serde_json::from_value(v).unwrap();
    assert_eq!(back, p);
    assert_eq!(r.file_json(), r.port());
    // A route this version does not know makes the file unreadable, never a /vm port.
    let mut v = serde_json::to_value(&p).unwrap();
    v["port-route"] = "nova".into();
    assert!(serde_json::from_value::<Record>(v).is_err());
}

#[test]
fn the_port_body_has_every_field_the_agent_requires_with_its_type() {
    let r = record(A, "c1", "net1");
    let body = r.port_body();
    let o = body.as_object().unwrap();
    let strings = [
        ("id", A.to_string()),
        ("instance-id", r.vm_uuid.to_string()),
        ("vn-id", r.vn_uuid.to_string()),
        (
            "vm-project-id",
            "00000000-0000-0000-0000-000000000000".into(),
        ),
        ("display-name", POD.to_string()),
        ("ip-address", "0.0.0.0".into()),
        ("ip6-address", String::new()),
        ("system-name", r.host_ifname.to_string()),
        ("mac-address", "02:00:00:00:00:01".into()),
    ];
    for (k, v) in &strings {
        assert_eq!(o.get(*k).and_then(|x| x.as_str()), Some(v.as_str()), "{k}");
    }
    for (k, v) in [
        ("type", 0),
        ("rx-vlan-id", -1),
        ("tx-vlan-id", -1),
        ("vhostuser-mode", 1),
    ] {
        assert!(o[k].is_i64(), "{k} must be an integer: {}", o[k]);
        assert_eq!(o[k].as_i64(), Some(v), "{k}");
    }
    // Nothing else: the /vm keys are not sent on this route.
    assert_eq!(o.len(), strings.len() + 4, "{body}");
}
