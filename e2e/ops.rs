//! Operating the plugin: install and upgrade, the DaemonSet's installer, `inspect` against
//! deliberately broken states, `--version`.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use contrail_testkit::*;
use serde_json::{Value, json};

/// Runs the binary by hand, as an operator does (no CNI_COMMAND).
fn by_hand(bin: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn version_names_the_git_revision() {
    let (ok, out, _) = by_hand(&plugin_bin(), &["--version"]);
    assert!(ok);
    assert!(
        out.starts_with(&format!(
            "contrail-k8s-cni {} (git ",
            env!("CARGO_PKG_VERSION")
        )),
        "{out}"
    );
    assert!(out.contains("1.1.0"), "{out}");
}

#[test]
fn run_by_hand_without_arguments_it_says_what_it_is_like_the_reference_plugins() {
    let out = Command::new(plugin_bin()).env_clear().output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "stdout belongs to CNI results");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err,
        format!(
            "CNI contrail-k8s-cni plugin v{}\nCNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn every_subcommand_has_help_and_mistakes_are_explained() {
    for args in [
        &["--help"][..],
        &["install", "--help"],
        &["inspect", "--help"],
    ] {
        let (ok, out, err) = by_hand(&plugin_bin(), args);
        assert!(ok, "{args:?}: {err}");
        assert!(out.contains("Usage: contrail-k8s-cni"), "{args:?}: {out}");
    }
    let (_, out, _) = by_hand(&plugin_bin(), &["install", "--help"]);
    assert!(
        out.contains("--bin-dir <DIR>") && out.contains("--conf <FILE>"),
        "{out}"
    );
    let (_, out, _) = by_hand(&plugin_bin(), &["--help"]);
    assert!(out.contains("install") && out.contains("inspect"), "{out}");
    for (args, words) in [
        (&["frobnicate"][..], "unrecognized subcommand"),
        (&["install", "--bin-dir"], "a value is required"),
        (
            &["install", "--bin-dir", "/x", "--conf", "/y"],
            "--conf-dir",
        ),
        (&["inspect", "--jsn"], "--jsn"),
        (
            &["install", "--bin-dir", "/x", "--frobnicate"],
            "--frobnicate",
        ),
    ] {
        let out = Command::new(plugin_bin())
            .env_clear()
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(err.contains(words), "{args:?}: {err}");
    }
}

#[test]
fn install_into_a_fresh_root_and_upgrade_over_a_running_copy() {
    let root = TempDir::new();
    let (bin_dir, conf_dir) = (root.0.join("opt/cni/bin"), root.0.join("etc/cni/net.d"));
    let conf = repo_file("netconf/10-contrail.conf");
    let args = [
        "install",
        "--bin-dir",
        bin_dir.to_str().unwrap(),
        "--conf-dir",
        conf_dir.to_str().unwrap(),
        "--conf",
        conf.to_str().unwrap(),
    ];
    let (ok, out, err) = by_hand(&plugin_bin(), &args);
    assert!(ok, "{err}");
    assert!(out.contains("installed"), "{out}");
    let installed = bin_dir.join("contrail-k8s-cni");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(plugin_bin()).unwrap()
    );
    assert_eq!(
        std::fs::metadata(&installed).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert_eq!(
        std::fs::read(conf_dir.join("10-contrail.conf")).unwrap(),
        std::fs::read(&conf).unwrap()
    );

    // A kubelet is running the installed copy (a VERSION call blocked on its stdin) while the
    // next version is installed over it.
    let mut running = Command::new(&installed)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let before = std::fs::metadata(&installed).unwrap().ino();
    let (ok, _, err) = by_hand(&plugin_bin(), &args);
    assert!(ok, "upgrade over a running copy failed: {err}");
    assert_ne!(
        std::fs::metadata(&installed).unwrap().ino(),
        before,
        "replaced by rename, not rewritten in place"
    );
    running
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"cniVersion":"1.0.0"}"#)
        .unwrap();
    let out = running.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cniVersion"], "1.0.0");
    // The installed copy works: it is the plugin.
    let (ok, out, _) = by_hand(&installed, &["--version"]);
    assert!(ok && out.starts_with("contrail-k8s-cni"));
    // No temp files are left beside them.
    for dir in [&bin_dir, &conf_dir] {
        assert_eq!(
            std::fs::read_dir(dir).unwrap().count(),
            1,
            "{}",
            dir.display()
        );
    }
}

#[test]
fn install_refuses_a_config_the_plugin_would_reject() {
    let root = TempDir::new();
    let bad = root.0.join("10-contrail.conf");
    std::fs::write(
        &bad,
        json!({"cniVersion": "0.3.1", "contrail": {"mtu": 10}}).to_string(),
    )
    .unwrap();
    let conf_dir = root.0.join("net.d");
    let (ok, _, err) = by_hand(
        &plugin_bin(),
        &[
            "install",
            "--bin-dir",
            root.0.join("bin").to_str().unwrap(),
            "--conf-dir",
            conf_dir.to_str().unwrap(),
            "--conf",
            bad.to_str().unwrap(),
        ],
    );
    assert!(!ok);
    assert!(err.contains("contrail.mtu"), "{err}");
    assert!(!conf_dir.join("10-contrail.conf").exists());
    let (ok, _, err) = by_hand(&plugin_bin(), &["install"]);
    assert!(
        !ok && err.contains("required") && err.contains("--bin-dir"),
        "{err}"
    );
}

#[test]
fn the_daemonset_installer_installs_onto_the_host_paths() {
    let text = std::fs::read_to_string(repo_file("deploy/contrail-k8s-cni.yaml")).unwrap();
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let config_map = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_file("netconf/10-contrail.conf")).unwrap(),
    )
    .unwrap();
    let in_map: Value =
        serde_json::from_str(config_map["data"]["10-contrail.conf"].as_str().unwrap()).unwrap();
    assert_eq!(
        in_map, shipped,
        "the ConfigMap must carry netconf/10-contrail.conf"
    );

    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let spec = &ds["spec"]["template"]["spec"];
    let init = &spec["initContainers"][0];
    // Where each mount of the init container lands on this test's "node".
    let root = TempDir::new();
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for m in init["volumeMounts"].as_sequence().unwrap() {
        let volume = spec["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap();
        let host = match volume["hostPath"]["path"].as_str() {
            Some(p) => root.0.join(p.trim_start_matches('/')),
            None => {
                // The ConfigMap volume: its files in a directory.
                let dir = root.0.join("configmap");
                std::fs::create_dir_all(&dir).unwrap();
                for (name, body) in config_map["data"].as_mapping().unwrap() {
                    std::fs::write(dir.join(name.as_str().unwrap()), body.as_str().unwrap())
                        .unwrap();
                }
                dir
            }
        };
        mounts.push((m["mountPath"].as_str().unwrap().to_string(), host));
    }
    let command: Vec<String> = init["command"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert_eq!(command[1], "install");
    let args: Vec<String> = command[1..]
        .iter()
        .map(
            |a| match mounts.iter().find(|(m, _)| a.starts_with(m.as_str())) {
                Some((m, host)) => format!("{}{}", host.display(), &a[m.len()..]),
                None => a.clone(),
            },
        )
        .collect();
    let (ok, _, err) = by_hand(
        &plugin_bin(),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(ok, "{err}");
    assert!(root.0.join("opt/cni/bin/contrail-k8s-cni").exists());
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(root.0.join("etc/cni/net.d/10-contrail.conf")).unwrap(),
    )
    .unwrap();
    assert_eq!(written, shipped);
}

fn inspect(node: &Node) -> Vec<Value> {
    let conf = node.conf_dir.0.join("10-contrail.conf");
    std::fs::write(
        &conf,
        json!({"cniVersion": "0.3.1", "contrail": node.contrail()}).to_string(),
    )
    .unwrap();
    let (ok, out, err) = by_hand(
        &plugin_bin(),
        &["inspect", "--config", conf.to_str().unwrap(), "--json"],
    );
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// The rows whose health starts with `health`: (pod column, fix column).
fn findings(rows: &[Value], health: &str) -> Vec<(String, String)> {
    rows.iter()
        .filter(|r| r["health"].as_str().unwrap().starts_with(health))
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            (s("pod"), s("fix"))
        })
        .collect()
}

#[test]
fn inspect_reports_every_kind_of_debris_with_its_fix() {
    // Debris as killed calls, an agent that did not answer and other software leave it.
    let fx = Fixture::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    fx.add("eth0", "default");
    let ports = fx.node.ports_dir();
    let pod_dir = |name: &str| {
        let dir = ports.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    };
    pod_dir("k8s__default__empty");
    std::fs::write(pod_dir("k8s__default__pending").join(".resync"), uuid()).unwrap();
    let killed = pod_dir("k8s__default__killed");
    std::fs::write(killed.join(format!(".{}.tmp", uuid())), "{").unwrap();
    // An ADD that failed: its attachment keeps its VMI, without an interface.
    let vmi = uuid();
    let reserved = json!({"vm-id": "c9", "vm-uuid": uuid(), "vm-name": "k8s__default__failed",
        "host-ifname": "tap000000000009", "vm-ifname": "net1", "vm-namespace": "/run/netns/x",
        "vn-uuid": uuid(), "vmi-uuid": vmi, "contrail-k8s-cni-state": "1"});
    std::fs::write(
        pod_dir("k8s__default__failed").join(format!(".{vmi}.reserved")),
        reserved.to_string(),
    )
    .unwrap();
    let odd = pod_dir("k8s__default__odd");
    sh("mkfifo", &[odd.join(uuid()).to_str().unwrap()]);
    std::fs::write(odd.join("notes.txt"), "mine").unwrap();
    std::fs::write(ports.join("README"), "not a pod").unwrap();
    std::os::unix::fs::symlink("/nowhere", ports.join(".locks/odd")).unwrap();
    std::fs::write(ports.join(".locks/k8s__default__gone"), "").unwrap();
    // The agent holds one of the pod's ports, and no state file explains it (in a pod with a
    // directory: inspect looks there, as the agent lists no pods).
    fx.sim
        .register(&fx.pod, 1, &host_ifname(&fx.pod.vmis[1].uuid), "net1");

    let rows = inspect(&fx.node);
    let expect = [
        ("empty pod directory", "k8s__default__empty", "removes it"),
        (
            "deregistration pending",
            "k8s__default__pending",
            "retries it",
        ),
        (
            "temp file left by a killed call",
            "k8s__default__killed",
            "removes it",
        ),
        (
            "unreadable state file: a FIFO, not a regular file",
            "k8s__default__odd",
            "left alone",
        ),
        (
            "not this plugin's",
            "k8s__default__odd/notes.txt",
            "left alone",
        ),
        ("not this plugin's", "README", "left alone"),
        ("not this plugin's", ".locks/odd", "left alone"),
        ("stale lock", "k8s__default__gone", "GC removes it"),
        (
            "ADD failed: holds its VMI, no interface",
            "default/failed",
            "retries the ADD",
        ),
        (
            "registered with the agent without a state file",
            &fx.pod.vm_name(),
            &fx.pod.uuid,
        ),
    ];
    for (health, pod, fix) in expect {
        let found = findings(&rows, health);
        assert!(
            found.iter().any(|(p, f)| p == pod && f.contains(fix)),
            "no {health:?} row for {pod} with a fix saying {fix:?}: {rows:#?}"
        );
    }
    // GC does what the fixes say it does, and leaves the rest alone.
    fx.node.gc(json!([])).assert_ok();
    let rows = inspect(&fx.node);
    for gone in [
        "empty pod directory",
        "deregistration pending",
        "temp file",
        "stale lock",
        "ADD failed",
    ] {
        assert_eq!(findings(&rows, gone), [], "{gone}: {rows:#?}");
    }
    assert_eq!(findings(&rows, "not this plugin's").len(), 3, "{rows:#?}");
    assert_eq!(
        findings(&rows, "unreadable state file").len(),
        1,
        "{rows:#?}"
    );
}

fn health_of(rows: &[Value], key: &str, value: &str) -> String {
    let row = rows
        .iter()
        .find(|r| r[key] == value)
        .unwrap_or_else(|| panic!("no row with {key}={value}: {rows:?}"));
    row["health"].as_str().unwrap().to_string()
}

#[test]
fn inspect_finds_each_kind_of_breakage() {
    let pods: Vec<PodSpec> = (1..=4)
        .map(|n| PodSpec::new(vec![VmiSpec::new("default", n)]))
        .collect();
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &[]);
    let node = Node::new(&sim);
    let spaces: Vec<Netns> = pods.iter().map(|_| Netns::new()).collect();
    let cid = uuid();
    // Every pod's eth0, each pod in a netns of its own (several pods share one node: no Fixture).
    let call_all = |command: &str| {
        for (pod, ns) in pods.iter().zip(&spaces) {
            let conf = node.netconf("1.0.0", "");
            let args = pod.multus_args(&cid);
            node.cni(command)
                .container(&cid)
                .netns(&ns.path())
                .ifname("eth0")
                .args(&args)
                .run(&conf)
                .assert_ok();
        }
    };
    call_all("ADD");
    let vmi = |i: usize| pods[i].vmis[0].uuid.clone();
    let rows = inspect(&node);
    for i in 0..4 {
        assert_eq!(health_of(&rows, "vmi", &vmi(i)), "ok");
    }
    let ok_row = rows.iter().find(|r| r["vmi"] == vmi(0).as_str()).unwrap();
    assert_eq!(ok_row["pod"], format!("default/{}", pods[0].name));
    assert_eq!(ok_row["ifname"], "eth0");
    assert_eq!(ok_row["mac"], pods[0].vmis[0].mac);
    assert_eq!(ok_row["addresses"], json!([pods[0].vmis[0].addr()]));

    // 1. Someone deleted the pod's interface.
    sh("ip", &["-n", &spaces[1].name, "link", "del", "eth0"]);
    // 2. The agent lost the port (restarted without it).
    ureq::delete(&format!(
        "http://127.0.0.1:{}/vm/{}",
        sim.port, pods[2].uuid
    ))
    .call()
    .unwrap();
    // 3. The sandbox is gone, its DEL never came.
    let stale = spaces[3].name.clone();
    sh("ip", &["netns", "del", &stale]);
    // 4. A host veth named like ours that no state explains.
    let orphan = format!("tap{}{}", &tag(), &tag()[..4]);
    let _orphan = HostLink(orphan.clone());
    sh(
        "ip",
        &[
            "link",
            "add",
            &orphan,
            "type",
            "veth",
            "peer",
            "name",
            &format!("ck8so{}", tag()),
        ],
    );

    let rows = inspect(&node);
    assert_eq!(health_of(&rows, "vmi", &vmi(0)), "ok");
    assert_eq!(health_of(&rows, "vmi", &vmi(1)), "interface missing");
    assert_eq!(
        health_of(&rows, "vmi", &vmi(2)),
        "agent has no IP configuration for it"
    );
    assert_eq!(health_of(&rows, "vmi", &vmi(3)), "stale sandbox");
    assert_eq!(health_of(&rows, "host", &orphan), "orphan host link");

    // The human table says the same.
    let conf = node.conf_dir.0.join("10-contrail.conf");
    let (ok, table, _) = by_hand(
        &plugin_bin(),
        &["inspect", "--config", conf.to_str().unwrap()],
    );
    assert!(ok);
    assert!(table.starts_with("POD"), "{table}");
    let line = table.lines().find(|l| l.contains(&vmi(3))).unwrap();
    let (health, fix) = line.split_once("stale sandbox").unwrap();
    assert!(health.contains(&vmi(3)), "{line}");
    assert_eq!(
        fix.trim(),
        "GC or the sweep releases it (the sandbox's DEL never came)"
    );

    call_all("DEL");
    let rows = inspect(&node);
    assert!(rows.iter().all(|r| r["vmi"] == "-"), "state left: {rows:?}");
}

#[test]
fn check_and_inspect_see_a_look_alike_a_down_interface_and_another_pods_mac() {
    // A pod with NET_ADMIN tampers with its interface: CHECK fails with code 103 saying what
    // differs, and `inspect` reports the same, never `ok`.
    let pods: Vec<PodSpec> = (1..=4)
        .map(|n| PodSpec::new(vec![VmiSpec::new("default", n)]))
        .collect();
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &[]);
    let node = Node::new(&sim);
    let spaces: Vec<Netns> = pods.iter().map(|_| Netns::new()).collect();
    let cid = uuid();
    let call = |i: usize, command: &str| {
        let mut conf = node.netconf("1.0.0", "");
        conf["prevResult"] = json!({});
        node.cni(command)
            .container(&cid)
            .netns(&spaces[i].path())
            .ifname("eth0")
            .args(&pods[i].multus_args(&cid))
            .run(&conf)
    };
    for i in 0..pods.len() {
        call(i, "ADD").assert_ok();
    }
    let ip = |i: usize, args: &[&str]| {
        let mut all = vec!["-n", spaces[i].name.as_str()];
        all.extend_from_slice(args);
        sh("ip", &all);
    };
    // 0: renamed away, and a look-alike made: a veth of the pod's own with the VMI's MAC, MTU
    // and address, up.
    let (mac0, addr0) = (pods[0].vmis[0].mac.clone(), pods[0].vmis[0].addr());
    ip(0, &["link", "set", "eth0", "down"]);
    ip(0, &["link", "set", "eth0", "name", "old0"]);
    ip(
        0,
        &[
            "link", "add", "eth0", "address", &mac0, "type", "veth", "peer", "name", "y0",
        ],
    );
    ip(0, &["addr", "add", &addr0, "dev", "eth0"]);
    ip(0, &["link", "set", "eth0", "up"]);
    ip(0, &["link", "set", "y0", "up"]);
    // 1: down. 2: wearing pod 3's MAC.
    ip(1, &["link", "set", "eth0", "down"]);
    ip(2, &["link", "set", "eth0", "address", &pods[3].vmis[0].mac]);
    let rows = inspect(&node);
    for (i, words) in [
        (
            0,
            "eth0 in the pod is not the one attached to host interface",
        ),
        (1, "eth0 is down"),
        (2, &format!("has MAC {}", pods[3].vmis[0].mac) as &str),
    ] {
        let out = call(i, "CHECK");
        assert_eq!(out.code(), 103, "pod {i}: {}", out.stdout);
        assert!(out.msg().contains(words), "pod {i}: {}", out.msg());
        let health = health_of(&rows, "vmi", &pods[i].vmis[0].uuid);
        assert_eq!(health, out.msg(), "pod {i}: inspect says what CHECK says");
    }
    assert_eq!(health_of(&rows, "vmi", &pods[3].vmis[0].uuid), "ok");
    for i in 0..pods.len() {
        call(i, "DEL").assert_ok();
    }
    assert!(sim.ports().is_empty());
}
