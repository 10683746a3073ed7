//! Shipping: the container image (built with podman from `Containerfile`), the DaemonSet's
//! long-running `install --watch` (ConfigMap changes, a replaced binary, SIGTERM), its sweep of
//! gone sandboxes, and the metrics file read by a real Prometheus text-format parser.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use contrail_testkit::*;
use serde_json::{Value, json};

/// The bound on a wait for what `--watch` does at its next look (every 200 ms) or sweep: it
/// returns as soon as that is done; a busy machine may take seconds to copy the binary.
const BOUND: Duration = Duration::from_secs(60);

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

// ---------------------------------------------------------------- the image

/// Podman with storage of its own (removed with the directory), as e2e/podman.rs runs it:
/// vfs, cgroupfs and runc work on every machine here; the explicit ulimits too.
struct Podman(TempDir);

impl Podman {
    fn run(&self, args: &[&str]) -> String {
        let root = self.0.0.join("root");
        let runroot = self.0.0.join("runroot");
        let mut all = vec![
            "--root",
            root.to_str().unwrap(),
            "--runroot",
            runroot.to_str().unwrap(),
            "--storage-driver",
            "vfs",
            "--cgroup-manager",
            "cgroupfs",
            "--runtime",
            "runc",
        ];
        all.extend(args);
        if args[0] == "run" {
            let at = all.len() - args.len() + 1;
            for (i, a) in [
                "--ulimit",
                "nofile=20000:20000",
                "--ulimit",
                "nproc=4096:4096",
            ]
            .into_iter()
            .enumerate()
            {
                all.insert(at + i, a);
            }
        }
        sh("podman", &all)
    }
}

#[test]
fn the_image_is_the_static_binary_alone_and_its_installer_works() {
    let podman = Podman(TempDir::new());
    // The README's command; FROM scratch pulls nothing.
    let image = "localhost/contrail-k8s-cni:test";
    let repo_dir = repo_file("");
    podman.run(&[
        "build",
        "--quiet",
        "-f",
        repo_file("Containerfile").to_str().unwrap(),
        "-t",
        image,
        repo_dir.to_str().unwrap(),
    ]);
    let host = TempDir::new();
    let conf = TempDir::new();
    std::fs::copy(
        repo_file("netconf/10-contrail.conf"),
        conf.0.join("10-contrail.conf"),
    )
    .unwrap();
    // The DaemonSet's init container, as podman runs it: no network, the host's paths mounted.
    let host_mount = format!("{}:/host", host.0.display());
    let conf_mount = format!("{}:/etc/contrail-k8s-cni:ro", conf.0.display());
    podman.run(&[
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        &host_mount,
        "-v",
        &conf_mount,
        image,
        "install",
        "--bin-dir",
        "/host/opt/cni/bin",
        "--conf-dir",
        "/host/etc/cni/net.d",
        "--conf",
        "/etc/contrail-k8s-cni/10-contrail.conf",
    ]);
    let installed = host.0.join("opt/cni/bin/contrail-k8s-cni");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(plugin_bin()).unwrap(),
        "the image carries this build's binary"
    );
    assert_eq!(
        read(&host.0.join("etc/cni/net.d/10-contrail.conf")),
        read(&repo_file("netconf/10-contrail.conf"))
    );
    // The installed binary runs on the host as a runtime runs it.
    let out = run_cni(&installed, &[("CNI_COMMAND", "VERSION")], b"{}");
    assert!(
        out.json()["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.contains(&json!("1.1.0"))),
        "{}",
        out.stdout
    );
    let version = podman.run(&["run", "--rm", "--network", "none", image, "--version"]);
    let this = concat!("contrail-k8s-cni ", env!("CARGO_PKG_VERSION"), " ");
    assert!(version.starts_with(this), "{version}");
    // FROM scratch and one COPY: the binary is all there is.
    let layers = podman.run(&[
        "image",
        "inspect",
        "--format",
        "{{len .RootFS.Layers}}",
        image,
    ]);
    assert_eq!(layers.trim(), "1");
}

#[test]
fn the_release_binary_is_a_static_pie() {
    let out = sh("file", &[plugin_bin().to_str().unwrap()]);
    assert!(out.contains("static-pie linked"), "{out}");
}

// ---------------------------------------------------------------- install --watch

/// A directory laid out as kubelet mounts a ConfigMap: each version in a `..<timestamp>`
/// directory, `..data` pointing at the current one, each key a link through `..data`.
struct ConfigMapDir {
    dir: TempDir,
    generation: u32,
}

impl ConfigMapDir {
    fn new(files: &[(&str, &str)]) -> ConfigMapDir {
        let mut cm = ConfigMapDir {
            dir: TempDir::new(),
            generation: 0,
        };
        cm.publish(files);
        cm
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.0.join(key)
    }

    /// Kubelet's atomic update: a new version directory, `..data` swapped by a rename.
    fn publish(&mut self, files: &[(&str, &str)]) {
        self.generation += 1;
        let version = format!("..2026_11_23_00_00_0{}.{}", self.generation, tag());
        let vdir = self.dir.0.join(&version);
        std::fs::create_dir(&vdir).unwrap();
        for (key, body) in files {
            std::fs::write(vdir.join(key), body).unwrap();
        }
        let old = std::fs::read_link(self.dir.0.join("..data")).ok();
        symlink(&version, self.dir.0.join("..data_tmp")).unwrap();
        std::fs::rename(self.dir.0.join("..data_tmp"), self.dir.0.join("..data")).unwrap();
        for (key, _) in files {
            let link = self.dir.0.join(key);
            if link.symlink_metadata().is_err() {
                symlink(format!("..data/{key}"), link).unwrap();
            }
        }
        if let Some(old) = old {
            std::fs::remove_dir_all(self.dir.0.join(old)).unwrap();
        }
    }
}

fn node_conf(mtu: u32) -> String {
    json!({"cniVersion": "0.3.1", "name": "contrail-k8s-cni", "type": "contrail-k8s-cni",
           "contrail": {"mtu": mtu, "config-dir": "/var/lib/contrail/ports/vm"}})
    .to_string()
}

#[test]
fn watch_installs_configmap_changes_refuses_bad_ones_and_restores_the_binary() {
    let mut cm = ConfigMapDir::new(&[("10-contrail.conf", &node_conf(1500))]);
    let host = TempDir::new();
    let (bin_dir, conf_dir) = (host.0.join("opt/cni/bin"), host.0.join("etc/cni/net.d"));
    let installed = conf_dir.join("10-contrail.conf");
    let bin = bin_dir.join("contrail-k8s-cni");
    let watch = Watch::start(
        &bin_dir,
        &conf_dir,
        &cm.path("10-contrail.conf"),
        &["--sweep-interval", "0"],
    );
    wait_for("the first install", BOUND, || {
        read(&installed) == node_conf(1500)
    });
    // A ConfigMap edit reaches the node.
    cm.publish(&[("10-contrail.conf", &node_conf(1400))]);
    wait_for("the edit on the node", BOUND, || {
        read(&installed) == node_conf(1400)
    });
    // A config the plugin would reject is refused, logged, and the node keeps the last good one.
    cm.publish(&[("10-contrail.conf", &node_conf(10))]);
    wait_for("the refusal in the log", BOUND, || {
        watch.log().contains("refused")
    });
    assert!(watch.log().contains("contrail.mtu"), "{}", watch.log());
    assert_eq!(read(&installed), node_conf(1400));
    // A binary something else put there is replaced by the image's.
    std::fs::write(&bin, b"#!/bin/sh\nexit 1\n").unwrap();
    let ours = std::fs::read(plugin_bin()).unwrap();
    wait_for("the binary installed again", BOUND, || {
        std::fs::read(&bin).ok() == Some(ours.clone())
    });
    watch.terminate();
}

fn add(node: &Node, pod: &PodSpec, cid: &str, ns: &Netns) {
    let conf = node.netconf("1.0.0", "default");
    node.cni("ADD")
        .container(cid)
        .netns(&ns.path())
        .ifname("eth0")
        .args(&pod.multus_args(cid))
        .run(&conf)
        .assert_ok();
}

#[test]
fn the_sweep_releases_a_gone_sandbox_whatever_its_wall_clock_times_say() {
    // A node's clock stepped back after a reboot: claims seem to lie in the future. Under
    // Multus GC never reaches a secondary delegate, so the sweep is all there is. The grace is
    // measured on CLOCK_BOOTTIME, which no clock step moves; a claim of an earlier boot, or a
    // claim with only a wall-clock time that lies in the future, is past any grace.
    let pods: Vec<PodSpec> = (1..=3)
        .map(|n| PodSpec::new(vec![VmiSpec::new("default", n)]))
        .collect();
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &[]);
    let node = Node::new(&sim);
    let nss: Vec<Netns> = pods.iter().map(|_| Netns::new()).collect();
    for (pod, ns) in pods.iter().zip(&nss) {
        add(&node, pod, &uuid(), ns);
    }
    let future = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 86_400;
    let edit = |pod: &PodSpec, change: &dyn Fn(&mut Value)| {
        let file = node.ports_dir().join(pod.vm_name()).join(&pod.vmis[0].uuid);
        let mut record: Value = serde_json::from_str(&read(&file)).unwrap();
        change(&mut record);
        std::fs::write(&file, record.to_string()).unwrap();
    };
    // 0: written by 0.1, which kept the wall-clock time only, a day ahead of the clock now.
    edit(&pods[0], &|r| {
        r["time"] = json!(format!("{future}.000"));
        let r = r.as_object_mut().unwrap();
        r.remove("claimed-boot");
        r.remove("claimed-uptime-ms");
    });
    // 1: claimed in an earlier boot (and a day ahead on the wall clock).
    edit(&pods[1], &|r| {
        r["time"] = json!(format!("{future}.000"));
        r["claimed-boot"] = json!("00000000-0000-4000-8000-000000000000");
    });
    // 2: claimed a moment ago in this boot, also a day ahead on the wall clock: within grace.
    edit(&pods[2], &|r| r["time"] = json!(format!("{future}.000")));
    drop(nss);
    let conf_src = TempDir::new();
    let conf = conf_src.0.join("10-contrail.conf");
    std::fs::copy(node.node_file(), &conf).unwrap();
    let host = TempDir::new();
    let watch = Watch::start(
        &host.0.join("bin"),
        &host.0.join("net.d"),
        &conf,
        &["--sweep-interval", "1", "--sweep-grace", "3600"],
    );
    wait_for("the sweep", BOUND, || {
        watch.log().contains("sweep released 2 attachment(s)")
    });
    watch.terminate();
    assert!(!node.pod_dir_exists(&pods[0]) && !node.pod_dir_exists(&pods[1]));
    assert!(
        node.pod_dir_exists(&pods[2]),
        "within its grace, on CLOCK_BOOTTIME"
    );
    let ports: Vec<String> = sim.ports().into_iter().map(|p| p.0).collect();
    assert_eq!(ports, [pods[2].vmis[0].uuid.clone()]);
    for pod in &pods[..2] {
        assert!(!host_link_exists(&host_ifname(&pod.vmis[0].uuid)));
    }
    // GC releases the last one.
    node.gc(json!([])).assert_ok();
    assert!(sim.ports().is_empty());
    assert_eq!(node.leftovers(), [] as [String; 0]);
}

#[test]
fn the_sweep_releases_sandboxes_whose_netns_is_gone_and_keeps_live_ones() {
    let live = PodSpec::new(vec![VmiSpec::new("default", 1)]);
    let gone = PodSpec::new(vec![VmiSpec::new("default", 2)]);
    let sim = Sim::start(&[&live, &gone], &[]);
    let node = Node::new(&sim);
    let (live_ns, gone_ns) = (Netns::new(), Netns::new());
    let (live_cid, gone_cid) = (uuid(), uuid());
    add(&node, &live, &live_cid, &live_ns);
    add(&node, &gone, &gone_cid, &gone_ns);
    // The sandbox went without a DEL (a lost Multus cache): its netns is gone.
    drop(gone_ns);
    // The kernel removes the veth with the netns, in its own time (its cleanup work runs
    // later, sooner on an idle machine): the sweep must release the sandbox either way.
    let gone_tap = host_ifname(&gone.vmis[0].uuid);

    let conf_src = TempDir::new();
    let conf = conf_src.0.join("10-contrail.conf");
    std::fs::copy(node.node_file(), &conf).unwrap();
    let host = TempDir::new();
    let (bin_dir, conf_dir) = (host.0.join("bin"), host.0.join("net.d"));
    // Within the grace period: nothing is swept.
    let watch = Watch::start(
        &bin_dir,
        &conf_dir,
        &conf,
        &["--sweep-interval", "1", "--sweep-grace", "3600"],
    );
    wait_for("a sweep", BOUND, || {
        watch.log().contains("sweep released 0 attachment(s)")
    });
    assert!(node.pod_dir_exists(&gone));
    watch.terminate();
    // A power loss left a state file empty in a pod no call visits any more; an empty one
    // written since the boot is not the plugin's doing, and stays.
    let (torn, foreign) = (uuid(), uuid());
    let pod_dir = |pod: &str| node.ports_dir().join(format!("k8s__default__{pod}"));
    for (pod, file, when) in [
        ("torn", &torn, boot_time() - Duration::from_secs(60)),
        ("foreign", &foreign, std::time::SystemTime::now()),
    ] {
        std::fs::create_dir_all(pod_dir(pod)).unwrap();
        write_dated(&pod_dir(pod).join(file), "", when);
    }
    // Past it: the gone sandbox is released as GC releases it; the live one is untouched.
    let watch = Watch::start(
        &bin_dir,
        &conf_dir,
        &conf,
        &["--sweep-interval", "1", "--sweep-grace", "0"],
    );
    wait_for("the gone sandbox released", BOUND, || {
        !node.pod_dir_exists(&gone) && !pod_dir("torn").exists()
    });
    watch.terminate();
    assert!(pod_dir("foreign").join(&foreign).exists());
    // The operator removes it, and the lock the sweep left beside it.
    std::fs::remove_dir_all(pod_dir("foreign")).unwrap();
    std::fs::remove_file(node.ports_dir().join(".locks/k8s__default__foreign")).unwrap();
    assert!(!host_link_exists(&gone_tap));
    let ports: Vec<String> = sim.ports().into_iter().map(|p| p.0).collect();
    assert_eq!(ports, [live.vmis[0].uuid.clone()]);
    assert_eq!(node.state_files(&live), [live.vmis[0].uuid.clone()]);
    assert_eq!(live_ns.mac("eth0"), live.vmis[0].mac);
    node.cni("DEL")
        .container(&live_cid)
        .netns(&live_ns.path())
        .ifname("eth0")
        .args(&live.multus_args(&live_cid))
        .run(&node.netconf("1.0.0", "default"))
        .assert_ok();
    assert_eq!(node.leftovers(), [] as [String; 0]);
}

// ---------------------------------------------------------------- metrics

/// The samples of a Prometheus text file, as the `prometheus_client` package parses it:
/// (name, labels, value).
fn parse_prometheus(file: &Path) -> Vec<(String, Value, f64)> {
    let python = repo_file("target/venv-test/bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/test creates it (python3 -m venv target/venv-test && \
         target/venv-test/bin/pip install prometheus-client)",
        python.display()
    );
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(open(sys.argv[1]).read()):
    for s in family.samples:
        out.append([s.name, s.labels, s.value])
print(json.dumps(out))
"#;
    let out = sh(
        python.to_str().unwrap(),
        &["-c", script, file.to_str().unwrap()],
    );
    serde_json::from_str::<Vec<(String, Value, f64)>>(&out).unwrap()
}

fn sample(samples: &[(String, Value, f64)], name: &str, labels: Value) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| n == name && *l == labels)
        .map(|s| s.2)
}

#[test]
fn the_metrics_file_adds_up_after_concurrent_calls() {
    let pods: Vec<PodSpec> = (1..=8)
        .map(|n| PodSpec::new(vec![VmiSpec::new("default", n)]))
        .collect();
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &[]);
    let mut node = Node::new(&sim);
    node.roomy();
    let collector = TempDir::new();
    let metrics = collector.0.join("contrail-k8s-cni.prom");
    node.set("metrics-file", json!(metrics.to_str().unwrap()));
    let spaces: Vec<Netns> = pods.iter().map(|_| Netns::new()).collect();
    let cids: Vec<String> = pods.iter().map(|_| uuid()).collect();
    let conf = node.netconf("1.0.0", "default");
    let each = |command: &str| {
        std::thread::scope(|s| {
            for ((pod, ns), cid) in pods.iter().zip(&spaces).zip(&cids) {
                let (node, conf) = (&node, &conf);
                s.spawn(move || {
                    let args = pod.multus_args(cid);
                    let out = node
                        .cni(command)
                        .container(cid)
                        .netns(&ns.path())
                        .ifname("eth0")
                        .args(&args)
                        .run(conf);
                    out.assert_ok();
                });
            }
        })
    };
    each("ADD");
    each("DEL");
    // One failure: a network the pod does not have (code 101).
    let args = pods[0].multus_args(&cids[0]);
    let out = node
        .cni("ADD")
        .container(&cids[0])
        .netns(&spaces[0].path())
        .ifname("net1")
        .args(&args)
        .run(&node.netconf("1.0.0", "net-x"));
    assert_eq!(out.code(), 101);

    let samples = parse_prometheus(&metrics);
    let calls = |command: &str, code: &str| {
        sample(
            &samples,
            "contrail_cni_calls_total",
            json!({"command": command, "code": code}),
        )
    };
    // Every call is counted, but one that waited over a second for the file's lock (eight
    // writers at once on a busy machine) skips its update, by design, and says so in the log:
    // what is missing must be what was said to be skipped, never an update lost silently.
    let skipped = |command: &str| -> f64 {
        let log = node.log();
        let pid = |line: &str| -> Option<String> {
            let rest = line.split_once("contrail-k8s-cni[")?.1;
            Some(rest.split_once(']')?.0.to_string())
        };
        let skippers: Vec<String> = log
            .lines()
            .filter(|l| l.contains("updating metrics file") && l.contains("skipped"))
            .filter_map(pid)
            .collect();
        log.lines()
            .filter(|l| {
                let call = l.split_once("] ").map_or("", |(_, rest)| rest);
                call.starts_with(&format!("{command} container="))
                    && pid(l).is_some_and(|p| skippers.contains(&p))
            })
            .count() as f64
    };
    let (add_skipped, del_skipped) = (skipped("ADD"), skipped("DEL"));
    assert_eq!(calls("ADD", "0").unwrap_or(0.0) + add_skipped, 8.0);
    assert_eq!(calls("DEL", "0").unwrap_or(0.0) + del_skipped, 8.0);
    assert_eq!(calls("ADD", "101"), Some(1.0));
    for (command, n) in [("ADD", 9.0 - add_skipped), ("DEL", 8.0 - del_skipped)] {
        for family in [
            "contrail_cni_call_duration_seconds",
            "contrail_cni_agent_wait_seconds",
        ] {
            let count = format!("{family}_count");
            let inf = format!("{family}_bucket");
            assert_eq!(
                sample(&samples, &count, json!({"command": command})),
                Some(n),
                "{family}"
            );
            assert_eq!(
                sample(&samples, &inf, json!({"command": command, "le": "+Inf"})),
                Some(n)
            );
        }
    }
    let sum = sample(
        &samples,
        "contrail_cni_call_duration_seconds_sum",
        json!({"command": "ADD"}),
    )
    .unwrap();
    assert!(sum > 0.0 && sum < 60.0, "{sum}");
    assert!(
        sample(
            &samples,
            "contrail_cni_last_failure_timestamp_seconds",
            json!({})
        )
        .is_some()
    );
    // Only the file and its lock: no temp file left by a writer.
    let mut names: Vec<String> = std::fs::read_dir(&collector.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [".contrail-k8s-cni.prom.lock", "contrail-k8s-cni.prom"]
    );
}

#[test]
fn the_daemonset_runs_the_project_image_alone_and_watches() {
    let text = read(&repo_file("deploy/contrail-k8s-cni.yaml"));
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let spec = &ds["spec"]["template"]["spec"];
    let containers: Vec<&serde_yaml::Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec[*k].as_sequence().unwrap())
        .collect();
    for c in &containers {
        // The image of this version: one image for both containers.
        let image = concat!("contrail-k8s-cni:", env!("CARGO_PKG_VERSION"));
        assert_eq!(c["image"].as_str(), Some(image), "{c:?}");
    }
    let main = &spec["containers"][0]["command"];
    let args: Vec<&str> = main
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&args[1..3], ["install", "--watch"]);
    // Every flag the manifest passes is one the binary takes.
    let help = String::from_utf8(
        Command::new(plugin_bin())
            .args(["install", "--help"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(flag), "{flag} is not in install --help");
    }
}
