//! The Kubernetes API as the meta-plugins read it: the simulator's stand-in (`contrail-agent-sim
//! --kube-api`, `sim/src/kube_api/`) serving the agent simulator's own pod description, so that
//! the pods and NADs Multus and CNI-Genie read are the ones kube-manager made the VMIs of.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::bins::sim_bin;
use crate::files::TempDir;
use crate::netns::{enter_node, private_run};
use crate::pod::PodSpec;
use crate::sim::Sim;

/// The node every pod is bound to (`spec.nodeName`), which Multus thick's daemon watches.
pub const NODE_NAME: &str = "node-1";

/// A Kubernetes API server on an ephemeral loopback port, killed on drop; its own process, so
/// that the agent can stop and restart under a meta-plugin that keeps watching.
pub struct KubeApi {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    dir: TempDir,
}

impl KubeApi {
    /// The API of the cluster `sim` serves the VMIs of: the same description file.
    pub fn of(sim: &Sim) -> KubeApi {
        enter_node();
        let dir = TempDir::new();
        let mut child = Command::new(sim_bin())
            .args(["--pods", sim.description().to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0", "--kube-api", "127.0.0.1:0"])
            .args(["--kube-api-tls", dir.0.to_str().unwrap()])
            .args(["--node-name", NODE_NAME])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut addr = String::new();
        for _ in 0..2 {
            addr.clear();
            out.read_line(&mut addr).unwrap();
        }
        let addr = addr
            .trim()
            .strip_prefix("kube-api listening on ")
            .unwrap_or_else(|| panic!("the Kubernetes API did not start: {addr:?}"))
            .to_string();
        let api = KubeApi { child, addr, dir };
        api.write_kubeconfigs();
        api
    }

    /// A kubeconfig for it: plain HTTP, no credentials.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.0.join("kubeconfig")
    }

    /// The CA its HTTPS certificate is signed by (`--kube-api-tls`), as a cluster's `ca.crt`.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.0.join("ca.crt")
    }

    /// What an in-cluster client (client-go's `rest.InClusterConfig`, Multus thick's daemon)
    /// needs, as the kubelet gives it to a pod: the service account mounted at
    /// `/var/run/secrets/kubernetes.io/serviceaccount` (`token`, `ca.crt`, `namespace`; in a
    /// private `/run` of the node, see [`private_run`]), and the environment that names the API
    /// server (HTTPS). Returns that environment.
    pub fn in_cluster(&self) -> Vec<(String, String)> {
        private_run();
        let dir = std::path::Path::new("/run/secrets/kubernetes.io/serviceaccount");
        std::fs::create_dir_all(dir).unwrap();
        std::fs::copy(self.ca_cert(), dir.join("ca.crt")).unwrap();
        // The stand-in authenticates no one; client-go only needs a token to send.
        std::fs::write(dir.join("token"), "test-token").unwrap();
        std::fs::write(dir.join("namespace"), "kube-system").unwrap();
        let (host, port) = self.addr.rsplit_once(':').unwrap();
        vec![
            ("KUBERNETES_SERVICE_HOST".into(), host.into()),
            ("KUBERNETES_SERVICE_PORT".into(), port.into()),
        ]
    }

    /// A kubeconfig as a node's meta-plugin has one: HTTPS, the server verified against the
    /// cluster's CA, a token (the stand-in checks none).
    pub fn https_kubeconfig(&self) -> PathBuf {
        self.dir.0.join("kubeconfig-https")
    }

    fn kubeconfig_text(&self, cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n{cluster}\
             users:\n- name: test\n  user: {user}\ncontexts:\n- name: test\n  \
             context:\n    cluster: test\n    user: test\ncurrent-context: test\n"
        )
    }

    fn write_kubeconfigs(&self) {
        let plain = format!("    server: http://{}\n", self.addr);
        let tls = format!(
            "    server: https://{}\n    certificate-authority: {}\n",
            self.addr,
            self.ca_cert().display()
        );
        std::fs::write(self.kubeconfig(), self.kubeconfig_text(&plain, "{}")).unwrap();
        let token = "\n    token: test-token";
        std::fs::write(self.https_kubeconfig(), self.kubeconfig_text(&tls, token)).unwrap();
    }

    /// A request of the API's: its status and JSON body.
    pub fn call(&self, method: &str, path: &str, body: Option<(&str, &Value)>) -> (u16, Value) {
        let url = format!("http://{}{path}", self.addr);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut answer = match body {
            None => agent
                .run(
                    ureq::http::Request::builder()
                        .method(method)
                        .uri(&url)
                        .body(())
                        .unwrap(),
                )
                .unwrap(),
            Some((content_type, b)) => agent
                .run(
                    ureq::http::Request::builder()
                        .method(method)
                        .uri(&url)
                        .header("Content-Type", content_type)
                        .body(b.to_string())
                        .unwrap(),
                )
                .unwrap(),
        };
        let status = answer.status().as_u16();
        let text = answer.body_mut().read_to_string().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn pod_path(pod: &PodSpec) -> String {
        format!("/api/v1/namespaces/{}/pods/{}", pod.namespace, pod.name)
    }

    /// The pod as the API has it now.
    pub fn pod(&self, pod: &PodSpec) -> Value {
        let (status, body) = self.call("GET", &KubeApi::pod_path(pod), None);
        assert_eq!(status, 200, "GET pod {}: {body}", pod.name);
        body
    }

    /// The pod's annotation `key`, if it has one.
    pub fn annotation(&self, pod: &PodSpec, key: &str) -> Option<String> {
        self.pod(pod)["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_string)
    }

    /// The network-status annotation a meta-plugin wrote: one entry per interface it reports.
    pub fn network_status(&self, pod: &PodSpec) -> Vec<Value> {
        let text = self
            .annotation(pod, "k8s.v1.cni.cncf.io/network-status")
            .unwrap_or_else(|| panic!("pod {} has no network-status annotation", pod.name));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("network-status {text:?}: {e}"))
    }

    /// The pod is deleted from the API (its sandbox may live on).
    pub fn delete_pod(&self, pod: &PodSpec) {
        let (status, body) = self.call("DELETE", &KubeApi::pod_path(pod), None);
        assert_eq!(status, 200, "DELETE pod {}: {body}", pod.name);
    }

    /// The events recorded in the pod's namespace (both APIs').
    pub fn events(&self, namespace: &str) -> Vec<Value> {
        let (_, list) = self.call(
            "GET",
            &format!("/api/v1/namespaces/{namespace}/events"),
            None,
        );
        list["items"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
