//! The agent simulator: starting, stopping and restarting it, and talking to it as the plugin
//! does (HTTP, raw or not).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::bins::sim_bin;
use crate::cluster;
use crate::files::TempDir;
use crate::netns::enter_node;
use crate::pod::{PodSpec, VmiSpec};

/// The simulator's switches for a DPDK node whose vrouter-dpdk socket directory is
/// `vr_socket_dir`; its stand-in retries every 50 ms (vrouter-dpdk: 5 s), so that tests wait
/// little.
pub fn dpdk_args(vr_socket_dir: &Path) -> Vec<String> {
    let dir = vr_socket_dir.to_str().unwrap();
    ["--dpdk", "--vr-socket-dir", dir, "--vhost-retry-ms", "50"]
        .map(String::from)
        .to_vec()
}

/// One raw HTTP/1.1 exchange on a kept-alive connection ([`Sim::connect`]): (status line, body).
/// Raw on purpose: the status line and the framing are part of the agent's contract, and the
/// agent sends no Connection header (its sessions stay open).
pub fn exchange(
    conn: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (String, String) {
    let body = body.map(Value::to_string).unwrap_or_default();
    exchange_raw(conn, method, path, &body)
}

/// [`exchange`] with a body of any bytes (JSON cut short, another shape): what a test sends as
/// a client that breaks the contract would.
pub fn exchange_raw(
    conn: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    body: &str,
) -> (String, String) {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.get_mut().write_all(request.as_bytes()).unwrap();
    let mut status = String::new();
    conn.read_line(&mut status).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        assert!(
            !name.eq_ignore_ascii_case("connection"),
            "the agent sends no Connection header: {line}"
        );
        if name.eq_ignore_ascii_case("content-length") {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).unwrap();
    (status.trim().to_string(), String::from_utf8(body).unwrap())
}

/// The agent simulator on an ephemeral loopback port, killed on drop.
pub struct Sim {
    child: Child,
    /// The loopback address it listens on.
    pub ip: String,
    pub port: u16,
    bin: PathBuf,
    _dir: TempDir,
}

impl Sim {
    pub fn start(pods: &[&PodSpec], args: &[&str]) -> Sim {
        Sim::start_with(&sim_bin(), pods, args)
    }

    /// [`Sim::start`] with the simulator binary at `bin`.
    /// On a DPDK node: `--dpdk`, its vrouter-dpdk stand-in connecting to the `uvh_vif_` links
    /// in `vr_socket_dir` (see [`dpdk_args`]).
    pub fn dpdk(pods: &[&PodSpec], vr_socket_dir: &Path) -> Sim {
        let args = dpdk_args(vr_socket_dir);
        Sim::start(pods, &args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    pub fn start_with(bin: &Path, pods: &[&PodSpec], args: &[&str]) -> Sim {
        Sim::spawn(bin, Sim::pods_file(pods), "127.0.0.1", args)
    }

    /// [`Sim::start`] with the cluster's NetworkAttachmentDefinitions, from which it makes the
    /// VMIs of the pods given by their annotation ([`PodSpec::annotated`]) as kube-manager does.
    pub fn start_cluster(pods: &[&PodSpec], nads: &[cluster::Nad], args: &[&str]) -> Sim {
        let dir = Sim::pods_file(pods);
        let file = dir.0.join("pods.json");
        let mut body: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        body["nads"] = nads.iter().map(cluster::Nad::to_json).collect();
        std::fs::write(&file, body.to_string()).unwrap();
        Sim::spawn(&sim_bin(), dir, "127.0.0.1", args)
    }

    /// [`Sim::start`] on another loopback address (`127.0.0.2`: an endpoint that is not the
    /// node's agent).
    pub fn start_on(ip: &str, pods: &[&PodSpec], args: &[&str]) -> Sim {
        Sim::spawn(&sim_bin(), Sim::pods_file(pods), ip, args)
    }

    fn pods_file(pods: &[&PodSpec]) -> TempDir {
        let dir = TempDir::new();
        let body = json!({"pods": pods.iter().map(|p| p.to_json()).collect::<Vec<_>>()});
        std::fs::write(dir.0.join("pods.json"), body.to_string()).unwrap();
        dir
    }

    /// The agent dies: nothing listens on its port any more (until [`Sim::restart`]).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The agent restarts (on another port) with the same pods and new switches; what it had
    /// registered is gone, as when a real agent restarts without its port files.
    pub fn restart(&mut self, args: &[&str]) {
        self.stop();
        let dir = std::mem::replace(&mut self._dir, TempDir(PathBuf::new()));
        *self = Sim::spawn(&self.bin, dir, &self.ip, args);
    }

    /// The agent restarts (on another port) serving `pods`, as after kube-manager changed them.
    /// The pod description file it serves (and kube-manager made the VMIs of): what
    /// [`KubeApi::of`](crate::KubeApi::of) serves too.
    pub fn description(&self) -> PathBuf {
        self._dir.0.join("pods.json")
    }

    pub fn restart_with(&mut self, pods: &[&PodSpec], args: &[&str]) {
        self.stop();
        *self = Sim::spawn(&self.bin, Sim::pods_file(pods), &self.ip, args);
    }

    fn spawn(bin: &Path, dir: TempDir, ip: &str, args: &[&str]) -> Sim {
        enter_node();
        let file = dir.0.join("pods.json");
        let mut child = Command::new(bin)
            .args([
                "--pods",
                file.to_str().unwrap(),
                "--listen",
                &format!("{ip}:0"),
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("simulator did not start: {line:?}"));
        Sim {
            child,
            ip: ip.to_string(),
            port,
            bin: bin.to_path_buf(),
            _dir: dir,
        }
    }

    /// A raw HTTP connection to it, as the plugin opens one (`TCP_NODELAY`), for [`exchange`].
    pub fn connect(&self) -> BufReader<TcpStream> {
        let conn = TcpStream::connect((self.ip.as_str(), self.port)).unwrap();
        conn.set_nodelay(true).unwrap();
        BufReader::new(conn)
    }

    /// One GET; the answer's JSON body.
    pub fn get(&self, path: &str) -> Value {
        let url = format!("http://{}:{}{path}", self.ip, self.port);
        let body = ureq::get(&url)
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&body).unwrap()
    }

    /// Registers VMI `k` of `pod` the way the plugin does (`POST /vm`).
    pub fn register(&self, pod: &PodSpec, k: usize, host_ifname: &str, vm_ifname: &str) {
        let cfg = self.get(&format!("/vm-cfg/{}", pod.vm_name()));
        let vmi = &pod.vmis[k].uuid;
        let vn = cfg
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == vmi.as_str())
            .unwrap()["vn-id"]
            .clone();
        let port = json!({"vm-uuid": pod.uuid, "vm-name": pod.vm_name(), "vm-id": "test",
            "host-ifname": host_ifname, "vm-ifname": vm_ifname, "vn-uuid": vn, "vmi-uuid": vmi});
        let url = format!("http://{}:{}/vm", self.ip, self.port);
        ureq::post(&url).send_json(&port).unwrap();
    }

    /// The VMIs kube-manager made for `pod`, given by its networks annotation
    /// ([`PodSpec::annotated`]), in index order (`GET /sim/kube-manager`): the MAC and address
    /// each of its attachments must get.
    pub fn vmis_made(&self, pod: &PodSpec) -> Vec<VmiSpec> {
        let reports = self.get("/sim/kube-manager");
        let report = reports
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["pod"] == pod.vm_name().as_str())
            .unwrap_or_else(|| panic!("kube-manager read no annotation of {}", pod.name));
        let made = report["vmis"]
            .as_array()
            .unwrap_or_else(|| panic!("kube-manager made no VMI for {}: {report}", pod.name));
        made.iter()
            .map(|v| {
                let text = |k: &str| v[k].as_str().map(str::to_string);
                let mut extra = json!({});
                if let Some(i) = text("interface") {
                    extra["interface"] = json!(i);
                }
                VmiSpec {
                    uuid: text("uuid").unwrap(),
                    network: text("network").unwrap(),
                    mac: text("mac").unwrap(),
                    ip: text("ip"),
                    gateway: text("gateway"),
                    ip6: None,
                    v6_gateway: None,
                    extra,
                }
            })
            .collect()
    }

    /// The requests a nested node must never send that it received (see the simulator).
    pub fn violations(&self) -> Vec<Value> {
        self.get("/sim/violations").as_array().unwrap().clone()
    }

    /// How many requests it served (its own `/sim/` ones aside).
    pub fn requests(&self) -> u64 {
        self.get("/sim/stats")["requests"].as_u64().unwrap()
    }

    /// The ports the agent has registered: (vmi uuid, host ifname, vm ifname); a `POST /port`
    /// one as (`id`, `system-name`, "").
    pub fn ports(&self) -> Vec<(String, String, String)> {
        self.get("/sim/ports")
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let s = |k: &str| p[k].as_str().unwrap_or("").to_string();
                match p["sim-route"].as_str() {
                    Some("POST /port") => (s("id"), s("system-name"), String::new()),
                    _ => (s("vmi-uuid"), s("host-ifname"), s("vm-ifname")),
                }
            })
            .collect()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop();
    }
}
