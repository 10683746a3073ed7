//! libcni end to end: the release binary driven by the library runtimes use, in two versions:
//! libcni 1.1.2 (Debian's golang-github-appc-cni-dev, containerd 1.6's and podman 4's) through
//! `target/cnitool` (e2e/cnitool/main.go: cnitool's interface, built by scripts/test) with
//! Debian's `tuning` (containernetworking-plugins 1.1.1), and the real cnitool of libcni 1.3.0
//! (containerd 2.x's and CRI-O's libcni, with `gc` and `status`; `../shared/peers`) with the
//! reference plugins 1.9.1; with the network configs shipped in netconf/, `tuning` chained after
//! us.
//!
//! What libcni adds over calling the plugin by hand (e2e/plugin/): it finds .conf and
//! .conflist files by network name, injects `name` and `cniVersion` into each plugin's config,
//! hands each plugin's result to the next one as `prevResult`, caches the list's ADD result
//! and gives it back to CHECK and DEL as `prevResult` (from 0.4.0 on), refuses CHECK below
//! 0.4.0 without calling any plugin, and runs DEL in reverse plugin order.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use contrail_testkit::*;
use serde_json::{Value, json};

/// The versions libcni 1.1.2 and the plugin both support: libcni 1.1.2 knows none after 1.0.0.
const VERSIONS: [&str; 4] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"];
/// The network name in both shipped files; for the plugin it means the cluster network, whose
/// VMIs kube-manager annotates with network `default`.
const NETWORK: &str = "contrail-k8s-cni";
const TUNING: &str = "/usr/lib/cni/tuning";

/// Which libcni drives the plugin.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Driver {
    /// libcni 1.1.2 through e2e/cnitool/main.go, with Debian's `tuning` 1.1.1.
    Libcni11,
    /// The real cnitool of libcni 1.3.0, with `tuning` of the reference plugins 1.9.1.
    Cnitool13,
}

impl Driver {
    /// The driver's binary. The libcni 1.1 driver is built by scripts/test, not by cargo, and
    /// cnitool 1.3 is unpacked by it: a missing one is a broken setup, so the tests fail (never
    /// skip) and say how to get it.
    fn bin(self) -> PathBuf {
        match self {
            Driver::Libcni11 => {
                let p = repo_file("target/cnitool");
                assert!(
                    p.exists(),
                    "{} is missing: run scripts/test, which builds it (`GO111MODULE=off \
                     GOPATH=/usr/share/gocode go build -o target/cnitool e2e/cnitool/main.go`)",
                    p.display()
                );
                p
            }
            Driver::Cnitool13 => peer_bin("cnitool"),
        }
    }

    fn tuning(self) -> PathBuf {
        match self {
            Driver::Libcni11 => {
                assert!(
                    Path::new(TUNING).exists(),
                    "{TUNING} is missing: install containernetworking-plugins (scripts/test does)"
                );
                PathBuf::from(TUNING)
            }
            Driver::Cnitool13 => peer_bin("cni-tuning"),
        }
    }

    /// The CNI versions it and the plugin both speak.
    fn versions(self) -> &'static [&'static str] {
        match self {
            Driver::Libcni11 => &VERSIONS,
            Driver::Cnitool13 => &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
        }
    }
}

/// A config file as shipped in netconf/: the tests change only what they must, so the files
/// users copy are the ones proven here.
fn shipped(file: &str) -> Value {
    let p = repo_file("netconf").join(file);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
}

/// The container id cnitool derives from the netns path: "cnitool-" and the first 10 bytes of
/// its sha512 in hex (computed with coreutils, independently of the driver).
fn cnitool_container_id(netns: &str) -> String {
    let mut child = Command::new("sha512sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(netns.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    format!("cnitool-{}", &hex[..20])
}

/// One node's runtime, all of it private to the test so tests can run in parallel: network
/// configs (NETCONFPATH), plugins (CNI_PATH), libcni's cache (CNI_CACHE_DIR), and through the
/// fixture's Node the plugin's state dir, log file and an empty node-wide config dir
/// (CONTRAIL_CNI_CONF_DIR, so the machine's /etc/cni/net.d is never read). The fixture's pod
/// has one VMI, on the cluster network; its netns is the one a test uses unless it needs one
/// per CNI version (cnitool derives the container id from the netns path).
struct Runtime {
    driver: Driver,
    fx: Fixture,
    netconf_dir: TempDir,
    bin_dir: TempDir,
    cache_dir: TempDir,
    args: String,
}

impl Runtime {
    fn new() -> Runtime {
        Runtime::with(Driver::Libcni11)
    }

    fn with(driver: Driver) -> Runtime {
        let bin_dir = TempDir::new();
        std::os::unix::fs::symlink(plugin_bin(), bin_dir.0.join("contrail-k8s-cni")).unwrap();
        std::os::unix::fs::symlink(driver.tuning(), bin_dir.0.join("tuning")).unwrap();
        let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
        // cnitool keeps libcni's cache in libcni's /var/lib/cni, which the test's node has of its
        // own; the libcni 1.1 driver takes CNI_CACHE_DIR.
        let cache_dir = match driver {
            Driver::Libcni11 => TempDir::new(),
            Driver::Cnitool13 => private_dir("/var/lib/cni"),
        };
        // The pod identity as a runtime passes it; cnitool refuses empty values.
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
            fx.pod.namespace, fx.pod.name
        );
        Runtime {
            driver,
            fx,
            netconf_dir: TempDir::new(),
            bin_dir,
            cache_dir,
            args,
        }
    }

    /// A shipped `contrail` section with the node's settings (this test's simulator, state dir
    /// and log file), as a node-wide file and a conflist agree on a real node.
    fn localize(&self, contrail: &mut Value) {
        if contrail.is_null() {
            return;
        }
        for (key, value) in self.fx.node.contrail().as_object().unwrap() {
            contrail[key] = value.clone();
        }
    }

    /// netconf/10-contrail.conf at `version`, as the only file in NETCONFPATH.
    fn install_conf(&self, version: &str) -> Value {
        let mut conf = shipped("10-contrail.conf");
        conf["cniVersion"] = json!(version);
        self.localize(&mut conf["contrail"]);
        self.install("10-contrail.conf", &conf);
        conf
    }

    /// netconf/contrail.conflist at `version`, optionally with its plugins in reverse order.
    fn install_conflist(&self, version: &str, reverse: bool) -> Value {
        let mut list = shipped("contrail.conflist");
        list["cniVersion"] = json!(version);
        let plugins = list["plugins"].as_array_mut().unwrap();
        for p in plugins
            .iter_mut()
            .filter(|p| p["type"] == "contrail-k8s-cni")
        {
            self.localize(&mut p["contrail"]);
        }
        if reverse {
            plugins.reverse();
        }
        self.install("contrail.conflist", &list);
        list
    }

    fn install(&self, file: &str, conf: &Value) {
        // One file at a time: libcni would prefer a .conflist to a .conf of the same name.
        for e in std::fs::read_dir(&self.netconf_dir.0).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        std::fs::write(self.netconf_dir.0.join(file), conf.to_string()).unwrap();
    }

    /// `cnitool add|check|del|gc|status contrail-k8s-cni <netns>` with eth0, as a runtime does it.
    fn cnitool(&self, command: &str, netns: &str) -> Output {
        let out = Command::new(self.driver.bin())
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("NETCONFPATH", &self.netconf_dir.0)
            .env("CNI_PATH", &self.bin_dir.0)
            .env("CNI_CACHE_DIR", &self.cache_dir.0)
            .env("CNI_IFNAME", "eth0")
            .env("CNI_ARGS", &self.args)
            // libcni passes its own environment on to the plugins.
            .env("CONTRAIL_CNI_CONF_DIR", &self.fx.node.conf_dir.0)
            .args([command, NETWORK, netns])
            .output()
            .unwrap();
        Output {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).to_string(),
        }
    }

    #[track_caller]
    fn add(&self, ns: &Netns) -> Value {
        self.cnitool("add", &ns.path()).assert_ok().json()
    }

    /// libcni's cached results: `<cache dir>/results/<network>-<container id>-<ifname>`.
    fn cache_files(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.cache_dir.0.join("results")) {
            Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn cache_file(&self, netns: &str) -> PathBuf {
        self.cache_dir
            .0
            .join("results")
            .join(format!("{NETWORK}-{}-eth0", cnitool_container_id(netns)))
    }

    /// Whether the plugin logged a call of node-wide `command` (GC, STATUS).
    fn plugin_ran_node_wide(&self, command: &str) -> bool {
        let log =
            std::fs::read_to_string(self.fx.node.config_dir.0.join("cni.log")).unwrap_or_default();
        log.contains(&format!("{command} container= ifname= "))
    }

    /// Whether the plugin logged a call of `command` for the container of `netns`.
    fn plugin_ran(&self, command: &str, netns: &str) -> bool {
        let log =
            std::fs::read_to_string(self.fx.node.config_dir.0.join("cni.log")).unwrap_or_default();
        log.contains(&format!(
            "{command} container={} ifname=eth0 ",
            cnitool_container_id(netns)
        ))
    }
}

/// The last line of the driver's stderr: its own report, after whatever the plugins logged.
fn last_line(out: &Output) -> &str {
    out.stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

/// The plugin's CNI error object, which the driver prints as the last line of stderr.
#[track_caller]
fn cni_error(out: &Output) -> Value {
    assert!(!out.ok, "expected a failure, got success: {}", out.stdout);
    serde_json::from_str(last_line(out))
        .unwrap_or_else(|_| panic!("no CNI error object at the end of stderr: {}", out.stderr))
}

/// What a user checks after ADD: the pod's eth0 with the agent's MAC, address and default
/// route, the host end, the agent's port and the state file; and a result saying the same.
/// Returns the host end's name.
#[track_caller]
fn assert_attached(rt: &Runtime, ns: &Netns, version: &str, r: &Value) -> String {
    let vmi = &rt.fx.pod.vmis[0];
    assert_eq!(r["cniVersion"], version, "{r}");
    let host = r["interfaces"][0]["name"].as_str().unwrap().to_string();
    assert_eq!(r["interfaces"][1]["name"], "eth0", "{r}");
    assert_eq!(r["interfaces"][1]["mac"], vmi.mac, "{r}");
    assert_eq!(r["interfaces"][1]["sandbox"], ns.path(), "{r}");
    assert_eq!(r["ips"][0]["address"], vmi.addr(), "{r}");
    assert_eq!(ns.ifnames(), ["eth0", "lo"], "{version}");
    assert_eq!(ns.mac("eth0"), vmi.mac, "{version}");
    assert_eq!(ns.addrs("eth0"), [vmi.addr()], "{version}");
    assert_eq!(
        ns.default_routes(),
        [("-4".into(), vmi.gateway.clone().unwrap(), "eth0".into())],
        "{version}"
    );
    assert!(host_link_exists(&host), "{version}: {host} missing");
    assert_eq!(
        rt.fx.sim.ports(),
        [(vmi.uuid.clone(), host.clone(), "eth0".to_string())],
        "{version}"
    );
    assert_eq!(
        rt.fx.node.state_files(&rt.fx.pod),
        [vmi.uuid.as_str()],
        "{version}"
    );
    host
}

/// What a user checks after DEL: nothing left in the pod, on the host, in the state dir, at
/// the agent or in libcni's cache.
#[track_caller]
fn assert_detached(rt: &Runtime, ns: Option<&Netns>, host: &str) {
    let (sim, node, pod) = (&rt.fx.sim, &rt.fx.node, &rt.fx.pod);
    if let Some(ns) = ns {
        assert_eq!(ns.ifnames(), ["lo"]);
    }
    assert!(!host_link_exists(host), "{host} left on the host");
    assert!(
        !node.pod_dir_exists(pod),
        "state left: {:?}",
        node.state_files(pod)
    );
    assert!(sim.ports().is_empty(), "ports left: {:?}", sim.ports());
    assert!(
        rt.cache_files().is_empty(),
        "cache left: {:?}",
        rt.cache_files()
    );
}

/// libcni refuses CHECK below 0.4.0 itself (CheckNetworkList: "configuration version ... does
/// not support the CHECK command", a plain error) without calling any plugin; from 0.4.0 on it
/// calls every plugin with the cached result as prevResult.
#[track_caller]
fn check_as_libcni_allows(rt: &Runtime, ns: &Netns, version: &str) {
    let out = rt.cnitool("check", &ns.path());
    if version < "0.4.0" {
        assert!(!out.ok, "{version}: CHECK succeeded");
        assert_eq!(
            last_line(&out),
            format!("configuration version \"{version}\" does not support the CHECK command")
        );
        assert!(
            !rt.plugin_ran("CHECK", &ns.path()),
            "{version}: libcni called the plugin"
        );
    } else {
        out.assert_ok();
        assert!(rt.plugin_ran("CHECK", &ns.path()), "{version}");
    }
}

#[test]
fn single_conf_add_check_del_for_each_version() {
    for driver in [Driver::Libcni11, Driver::Cnitool13] {
        single_conf_add_check_del_through(driver);
    }
}

fn single_conf_add_check_del_through(driver: Driver) {
    let rt = Runtime::with(driver);
    for &version in driver.versions() {
        rt.install_conf(version);
        // A new netns per version: a new container id, so a new cache entry.
        let ns = Netns::new();
        let r = rt.add(&ns);
        let host = assert_attached(&rt, &ns, version, &r);
        assert_eq!(rt.cache_files(), [rt.cache_file(&ns.path())], "{version}");
        check_as_libcni_allows(&rt, &ns, version);
        // The refused CHECK changed nothing.
        assert_eq!(ns.mac("eth0"), rt.fx.pod.vmis[0].mac);
        rt.cnitool("del", &ns.path()).assert_ok();
        assert_detached(&rt, Some(&ns), &host);
    }
}

/// The sysctls of the conflist's tuning plugin as paths inside the pod and values. Tuning
/// replaces `IFNAME` in a key with CNI_IFNAME on ADD. A `net.ipv4.conf.all.*` key is a
/// netns-wide setting; for arp_notify the kernel applies the larger of `all` and the device's
/// value (IN_DEV_MAXCONF), so `all` = 1 turns it on for the pod's eth0 too.
fn tuning_sysctls(list: &Value, ifname: &str) -> Vec<(String, String)> {
    let tuning = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tuning")
        .expect("the conflist has a tuning plugin");
    tuning["sysctl"]
        .as_object()
        .expect("tuning has a sysctl map")
        .iter()
        .map(|(k, v)| {
            let key = k.replace('.', "/").replacen("IFNAME", ifname, 1);
            (format!("/proc/sys/{key}"), v.as_str().unwrap().to_string())
        })
        .collect()
}

fn read_in(ns: &Netns, path: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, "cat", path])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn conflist_contrail_then_tuning_for_each_version() {
    let types: Vec<Value> = shipped("contrail.conflist")["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].clone())
        .collect();
    assert_eq!(
        types,
        ["contrail-k8s-cni", "tuning"],
        "the shipped chain: we create eth0, tuning adjusts it"
    );
    let rt = Runtime::new();
    for version in VERSIONS {
        let list = rt.install_conflist(version, false);
        let ns = Netns::new();
        let sysctls = tuning_sysctls(&list, "eth0");
        // A sysctl that already exists in a fresh netns (not per-interface) starts at another
        // value, so the test sees tuning write it; the host's own value must not move.
        let mut host_before = Vec::new();
        for (path, want) in &sysctls {
            if read_in(&ns, path).is_some() {
                let other = if want == "0" { "1" } else { "0" };
                sh(
                    "ip",
                    &[
                        "netns",
                        "exec",
                        &ns.name,
                        "sh",
                        "-c",
                        "printf '%s\\n' \"$1\" > \"$2\"",
                        "sh",
                        other,
                        path,
                    ],
                );
            }
            host_before.push(std::fs::read_to_string(path).ok());
        }
        let r = rt.add(&ns);
        // Tuning passes our result on unchanged (converted to the list's version).
        let host = assert_attached(&rt, &ns, version, &r);
        for ((path, want), before) in sysctls.iter().zip(&host_before) {
            assert_eq!(
                read_in(&ns, path).as_deref(),
                Some(want.as_str()),
                "{version}: {path} in the pod"
            );
            assert_eq!(
                &std::fs::read_to_string(path).ok(),
                before,
                "{version}: {path} changed on the host"
            );
        }
        // From 0.4.0, libcni CHECKs both plugins with the cached result: ours, then tuning's,
        // which re-reads every sysctl in the pod. Debian's tuning 1.1.1 replaces IFNAME in ADD
        // but not in CHECK (fixed upstream later, containernetworking/plugins PR #885): a key
        // with `IFNAME` fails this CHECK with "open /proc/sys/net/ipv4/conf/IFNAME/arp_notify:
        // no such file or directory" (code 999), hence `conf.all` in the shipped conflist.
        check_as_libcni_allows(&rt, &ns, version);
        rt.cnitool("del", &ns.path()).assert_ok();
        assert_detached(&rt, Some(&ns), &host);
    }
}

#[test]
fn conflist_with_tuning_first_fails_and_leaves_nothing() {
    // Tuning only adjusts what an earlier plugin made: its ADD requires a prevResult and fails
    // with "Required prevResult missing" (a plain error, which its skel reports as code 999,
    // ErrInternal) before looking at any interface. libcni stops the chain at the first failure
    // and caches nothing, so the plugin is never called for ADD. This order cannot work by
    // tuning's design; what matters is that it fails clearly and leaves nothing behind.
    let rt = Runtime::new();
    let (ns, node, pod) = (&rt.fx.ns, &rt.fx.node, &rt.fx.pod);
    let version = shipped("contrail.conflist")["cniVersion"]
        .as_str()
        .unwrap()
        .to_string();
    rt.install_conflist(&version, true);
    let out = rt.cnitool("add", &ns.path());
    assert_eq!(
        cni_error(&out),
        json!({"code": 999, "msg": "Required prevResult missing"})
    );
    assert!(
        out.stderr
            .contains("plugin type=\"tuning\" failed (add): Required prevResult missing"),
        "{}",
        out.stderr
    );
    assert!(!rt.plugin_ran("ADD", &ns.path()));
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(pod));
    assert!(rt.fx.sim.ports().is_empty());
    assert!(rt.cache_files().is_empty());
    // The runtime then DELs the failed attachment: libcni runs DEL in reverse order (ours,
    // then tuning's) without a prevResult; both succeed with nothing to do.
    rt.cnitool("del", &ns.path()).assert_ok();
    assert!(rt.plugin_ran("DEL", &ns.path()));
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(pod));
    assert!(rt.fx.sim.ports().is_empty());
    assert!(rt.cache_files().is_empty());
}

#[test]
fn cached_result_feeds_check_and_del() {
    let rt = Runtime::new();
    let (ns, pod) = (&rt.fx.ns, &rt.fx.pod);
    let version = shipped("contrail.conflist")["cniVersion"]
        .as_str()
        .unwrap()
        .to_string();
    rt.install_conflist(&version, false);
    let r = rt.add(ns);
    let host = assert_attached(&rt, ns, &version, &r);

    // One cache entry, named as cnitool names it, holding the chain's final result.
    let file = rt.cache_file(&ns.path());
    assert_eq!(rt.cache_files(), [file.as_path()]);
    let cached: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(cached["kind"], "cniCacheV1");
    assert_eq!(cached["containerId"], cnitool_container_id(&ns.path()));
    assert_eq!(cached["ifName"], "eth0");
    assert_eq!(cached["networkName"], NETWORK);
    assert_eq!(
        cached["cniArgs"],
        json!([
            ["IgnoreUnknown", "1"],
            ["K8S_POD_NAMESPACE", pod.namespace],
            ["K8S_POD_NAME", pod.name]
        ])
    );
    assert_eq!(cached["result"], r);

    rt.cnitool("check", &ns.path()).assert_ok();
    // Without the cache, libcni CHECKs without a prevResult: ours still passes (it checks the
    // state file and the netns), tuning refuses; so the cache is what feeds CHECK.
    let aside = file.with_extension("aside");
    std::fs::rename(&file, &aside).unwrap();
    let out = rt.cnitool("check", &ns.path());
    assert_eq!(
        cni_error(&out),
        json!({"code": 999, "msg": "Required prevResult missing"})
    );
    std::fs::rename(&aside, &file).unwrap();
    rt.cnitool("check", &ns.path()).assert_ok();

    // DEL (with the cached result as prevResult) removes the attachment and the cache entry.
    rt.cnitool("del", &ns.path()).assert_ok();
    assert!(!file.exists());
    assert_detached(&rt, Some(ns), &host);
    // A second DEL has no cache entry, so no prevResult, and nothing to do: it succeeds.
    rt.cnitool("del", &ns.path()).assert_ok();
    assert_detached(&rt, Some(ns), &host);
}

#[test]
fn check_through_libcni_catches_a_broken_attachment() {
    let rt = Runtime::new();
    let ns = &rt.fx.ns;
    rt.install_conf("1.0.0");
    let r = rt.add(ns);
    let host = assert_attached(&rt, ns, "1.0.0", &r);
    let vmi = &rt.fx.pod.vmis[0];
    rt.cnitool("check", &ns.path()).assert_ok();

    // Someone changes the MAC inside the pod: CHECK fails with the plugin's code 103, and
    // libcni hands the plugin's error object through.
    let wrong = "02:00:00:00:00:99";
    sh(
        "ip",
        &["-n", &ns.name, "link", "set", "eth0", "address", wrong],
    );
    let e = cni_error(&rt.cnitool("check", &ns.path()));
    assert_eq!(e["code"], 103, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert!(msg.contains(wrong) && msg.contains(&vmi.mac), "{e}");
    sh(
        "ip",
        &["-n", &ns.name, "link", "set", "eth0", "address", &vmi.mac],
    );
    rt.cnitool("check", &ns.path()).assert_ok();

    // Someone deletes the pod's address.
    sh(
        "ip",
        &["-n", &ns.name, "addr", "del", &vmi.addr(), "dev", "eth0"],
    );
    let e = cni_error(&rt.cnitool("check", &ns.path()));
    assert_eq!(e["code"], 103, "{e}");
    assert!(e["msg"].as_str().unwrap().contains(&vmi.addr()), "{e}");

    // DEL still removes everything.
    rt.cnitool("del", &ns.path()).assert_ok();
    assert_detached(&rt, Some(ns), &host);
}

#[test]
fn del_through_libcni_after_the_netns_is_gone() {
    // A node reboot or a runtime that removed the netns first: libcni's DEL (same netns path,
    // so the same container id and cache entry) must still clean up the host and the agent.
    let rt = Runtime::new();
    let version = shipped("contrail.conflist")["cniVersion"]
        .as_str()
        .unwrap()
        .to_string();
    rt.install_conflist(&version, false);
    let path = rt.fx.ns.path();
    let r = rt.add(&rt.fx.ns);
    let host = assert_attached(&rt, &rt.fx.ns, &version, &r);
    rt.fx.remove_netns();
    rt.cnitool("del", &path).assert_ok();
    // The kernel destroys the veth with its netns asynchronously, if the DEL did not.
    wait_for("the host veth to go", Duration::from_secs(10), || {
        !host_link_exists(&host)
    });
    assert_detached(&rt, None, &host);
    rt.cnitool("del", &path).assert_ok();
}

#[test]
fn cni_version_1_1_0_is_beyond_libcni_1_1_2_and_del_cleans_up() {
    // The plugin supports 1.1.0, libcni 1.1.2 does not: the plugin's ADD succeeds, then libcni
    // cannot parse its result ("unsupported CNI result version") and fails the ADD without
    // caching anything. That is why the shipped files say 0.3.1 and 1.0.0. The runtime's DEL
    // after the failed ADD must remove the attachment libcni never reported.
    let rt = Runtime::new();
    let (ns, sim) = (&rt.fx.ns, &rt.fx.sim);
    rt.install_conf("1.1.0");
    let out = rt.cnitool("add", &ns.path());
    assert!(!out.ok, "{}", out.stdout);
    assert_eq!(
        last_line(&out),
        "plugin type=\"contrail-k8s-cni\" name=\"contrail-k8s-cni\" failed (add): \
         unsupported CNI result version \"1.1.0\""
    );
    assert!(rt.plugin_ran("ADD", &ns.path()));
    assert_eq!(ns.mac("eth0"), rt.fx.pod.vmis[0].mac);
    assert_eq!(sim.ports().len(), 1);
    assert!(rt.cache_files().is_empty());
    let host = sim.ports()[0].1.clone();
    rt.cnitool("del", &ns.path()).assert_ok();
    assert_detached(&rt, Some(ns), &host);
}

#[test]
fn cnitool_1_3_takes_the_shipped_conflist_at_1_1_0_and_asks_status() {
    // libcni 1.2+ reads `cniVersions` and calls every plugin of the list with the highest it
    // supports: 1.1.0, which the reference plugins 1.9.1 speak (Debian's 1.1.1 do not).
    let rt = Runtime::with(Driver::Cnitool13);
    let ns = &rt.fx.ns;
    let list = rt.install_conflist("1.0.0", false);
    assert_eq!(list["cniVersions"], json!(["1.0.0", "1.1.0"]));
    let r = rt.add(ns);
    let host = assert_attached(&rt, ns, "1.1.0", &r);
    // A 1.1.0 result: the pod's interface with its MTU, the address without a `version`.
    assert_eq!(r["interfaces"][1]["mtu"], 1500, "{r}");
    assert!(r["ips"][0].get("version").is_none(), "{r}");
    for (path, want) in tuning_sysctls(&list, "eth0") {
        assert_eq!(read_in(ns, &path).as_deref(), Some(want.as_str()), "{path}");
    }
    check_as_libcni_allows(&rt, ns, "1.1.0");
    // STATUS goes to every plugin of a 1.1.0 list: ready while the agent answers.
    rt.cnitool("status", &ns.path()).assert_ok();
    assert!(rt.plugin_ran_node_wide("STATUS"));
    rt.cnitool("del", &ns.path()).assert_ok();
    assert_detached(&rt, Some(ns), &host);
}

#[test]
fn cnitool_1_3_status_fails_while_the_agent_is_down() {
    let mut rt = Runtime::with(Driver::Cnitool13);
    rt.install_conflist("1.0.0", false);
    let ns = rt.fx.ns.path();
    rt.cnitool("status", &ns).assert_ok();
    rt.fx.stop_agent();
    let out = rt.cnitool("status", &ns);
    assert!(!out.ok);
    assert!(
        last_line(&out).contains("is unreachable"),
        "cnitool shows the plugin's message: {}",
        out.stderr
    );
    rt.fx.restart_agent(&[]);
    rt.cnitool("status", &ns).assert_ok();
}

#[test]
fn cnitool_1_3_gc_keeps_a_live_sandbox_and_releases_what_is_gone() {
    // `cnitool gc` asks libcni to GC with no list of live attachments: libcni first DELs every
    // attachment it cached for the network, then sends GC without a list. The plugin then
    // knows of no live sandbox and releases what is provably gone: of two sandboxes another
    // runtime attached (nothing in this libcni's cache), the one whose netns went; the other
    // stays whole.
    let mut rt = Runtime::with(Driver::Cnitool13);
    let (gone, live) = (
        PodSpec::new(vec![VmiSpec::new("default", 3)]),
        PodSpec::new(vec![VmiSpec::new("default", 5)]),
    );
    let fx = &mut rt.fx;
    fx.sim.restart_with(&[&fx.pod, &gone, &live], &[]);
    let port = fx.sim.port;
    fx.set("vrouter-port", json!(port));
    rt.install_conflist("1.0.0", false);
    let ns = &rt.fx.ns;
    let cached = rt.add(ns);
    let node = &rt.fx.node;
    let (gone_ns, live_ns) = (Netns::new(), Netns::new());
    for (pod, pod_ns) in [(&gone, &gone_ns), (&live, &live_ns)] {
        let cid = uuid();
        node.cni("ADD")
            .container(&cid)
            .netns(&pod_ns.path())
            .ifname("eth0")
            .args(&pod.multus_args(&cid))
            .run(&node.netconf("1.1.0", NETWORK))
            .assert_ok();
    }
    drop(gone_ns);
    rt.cnitool("gc", &ns.path()).assert_ok();
    assert!(
        rt.plugin_ran("DEL", &ns.path()),
        "libcni DELs what it cached"
    );
    assert!(rt.plugin_ran_node_wide("GC"));
    assert_detached_pod(&rt, ns, &host_name(&cached));
    assert!(!node.pod_dir_exists(&gone));
    assert_eq!(live_ns.ifnames(), ["eth0", "lo"]);
    assert_eq!(live_ns.mac("eth0"), live.vmis[0].mac);
    assert_eq!(node.state_files(&live), [live.vmis[0].uuid.clone()]);
    let ports: Vec<String> = rt.fx.sim.ports().into_iter().map(|p| p.0).collect();
    assert_eq!(ports, [live.vmis[0].uuid.clone()]);
}

/// [`assert_detached`] for the fixture's pod alone, on a node other pods share.
#[track_caller]
fn assert_detached_pod(rt: &Runtime, ns: &Netns, host: &str) {
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!host_link_exists(host), "{host} left on the host");
    assert!(!rt.fx.node.pod_dir_exists(&rt.fx.pod));
    assert!(
        rt.cache_files().is_empty(),
        "cache left: {:?}",
        rt.cache_files()
    );
}
