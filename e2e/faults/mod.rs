//! A misbehaving vRouter agent: hanging, slow, failing, garbled, truncated and hostile answers
//! (the simulator's fault switches). Each ADD must fail with the right code within its bound,
//! say what to look at, and leave nothing behind; DEL must work without a usable agent.
//!
//! By area: `transport` (an agent that hangs, is slow, answers 500, garbage or a cut-off answer),
//! `hostile` (answers crafted to break the plugin's assumptions, by hand and generated), `http`
//! (HTTP/1.1 framing and connection quirks, and a state file that tries to forge a request),
//! `del_check` (DEL and CHECK without a usable agent, VMIs that cannot make a pod, annotations
//! the plugin must read with care). This module holds the fixture and the crafted answers they
//! share.

mod del_check;
mod hostile;
mod http;
mod transport;

use std::time::{Duration, Instant};

use contrail_testkit::*;
use serde_json::{Value, json};

const POLL_TIMEOUT: f64 = 0.2;
const POLL_RETRIES: u32 = 3;
/// Process start and netns entry on a loaded 2-core CI machine: a correctness bound, not a
/// benchmark.
const SLACK: Duration = Duration::from_secs(3);

fn poll_timeout() -> Duration {
    Duration::from_secs_f64(POLL_TIMEOUT)
}

/// The whole wait for the agent (poll-timeout x poll-retries), plus one poll-timeout for the
/// rollback's requests (each gets what is left of the deadline, and at least 50 ms).
fn add_bound() -> Duration {
    poll_timeout() * POLL_RETRIES + poll_timeout()
}

/// The budget of the calls around the ones a test bounds, which must succeed however busy the
/// machine is: a deadline no scheduler delay comes near (poll-timeout, poll-retries).
const ROOMY: (f64, u32) = (1.0, 20);

/// One pod, its (faulty) agent, a node with a small poll budget, and the pod's netns.
struct Case {
    fx: Fixture,
    /// Holds the files of crafted answers (`--respond`), outside the node's directories.
    _files: TempDir,
}

impl Case {
    fn new(pod: PodSpec, sim_args: &[&str]) -> Case {
        Case::with_files(pod, TempDir::new(), sim_args)
    }

    fn with_files(pod: PodSpec, files: TempDir, sim_args: &[&str]) -> Case {
        let mut fx = Fixture::with_pod(pod, sim_args);
        fx.set("poll-timeout", json!(POLL_TIMEOUT))
            .set("poll-retries", json!(POLL_RETRIES));
        Case { fx, _files: files }
    }

    fn agent(&self) -> String {
        format!("127.0.0.1:{}", self.fx.node.port)
    }

    /// One call for the pod's first VMI (eth0 on the cluster network), timed.
    fn call(&self, command: &str, prev: Option<&Value>) -> (Output, Duration) {
        let conf = self.conf(prev);
        timed(|| self.fx.call(command, "eth0", &conf))
    }

    /// A call that must succeed (the setup around a fault, the clean-up after it), under the
    /// [`ROOMY`] budget.
    #[track_caller]
    fn ok(&mut self, command: &str, prev: Option<&Value>) -> Output {
        let conf = self.conf(prev);
        let out = self.fx.under(ROOMY, |fx| fx.call(command, "eth0", &conf));
        out.assert_ok();
        out
    }

    fn conf(&self, prev: Option<&Value>) -> Value {
        let mut conf = self.fx.conf("");
        if let Some(p) = prev {
            conf["prevResult"] = p.clone();
        }
        conf
    }

    /// ADD, expecting `code` within `bound` (plus slack) and a message holding every one of
    /// `words`; then nothing may be left but the claim's reservation (and a deregistration the
    /// rollback could not finish within the deadline, recorded as pending), and nothing at all
    /// once Multus sends the failed delegate its DEL. Returns the message.
    #[track_caller]
    fn add_fails(&mut self, code: u64, bound: Duration, words: &[&str]) -> String {
        let (out, took) = self.call("ADD", None);
        assert_eq!(out.code(), code, "{}", out.stdout);
        let msg = out.msg();
        eprintln!("ADD failed after {took:?} with code {code}: {msg}");
        assert!(
            took < bound + SLACK,
            "took {took:?}, bound {bound:?}: {msg}"
        );
        for w in words {
            assert!(msg.contains(w), "message lacks {w:?}: {msg}");
        }
        self.fx.assert_rolled_back();
        self.ok("DEL", None);
        self.assert_nothing_left();
        msg
    }

    /// No interface in the netns, no host end, no state, no port with the agent, and nothing
    /// in the config dir but the log and the (empty) state root.
    #[track_caller]
    fn assert_nothing_left(&self) {
        self.fx.assert_nothing_left();
        assert_eq!(self.fx.node.leftovers(), [] as [String; 0]);
    }

    /// An agent that sends `answer`, status line and headers included, to the requests `rule`
    /// (`METHOD:PATH_PREFIX`) names (`--raw`), and logs every request with its connection.
    fn raw(pod: PodSpec, rule: &str, answer: &[u8]) -> Case {
        let files = TempDir::new();
        let file = files.0.join("answer");
        std::fs::write(&file, answer).unwrap();
        let raw = format!("{rule}:{}", file.display());
        Case::with_files(pod, files, &["--log-requests", "--raw", &raw])
    }

    /// Every request the agent received, in order (`GET /sim/log`).
    fn received(&self) -> Vec<Value> {
        self.fx.sim.get("/sim/log").as_array().unwrap().clone()
    }

    /// The connections the requests `method` to paths starting with `prefix` came on.
    fn connections(&self, method: &str, prefix: &str) -> Vec<u64> {
        let of =
            |r: &Value| r["method"] == method && r["path"].as_str().unwrap().starts_with(prefix);
        self.received()
            .iter()
            .filter(|r| of(r))
            .map(|r| r["connection"].as_u64().unwrap())
            .collect()
    }
}

/// What `f` returns and how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

fn one_vmi_pod() -> PodSpec {
    PodSpec::new(vec![VmiSpec::new("default", 1)])
}

/// The pod's VMIs from /vm-cfg and its first VMI's IP config from /vm (once registered, as
/// the plugin registers it), as an unfaulted agent answers them, with `edit` applied to the one
/// on `which` ("vm-cfg" or "vm"): files and the `--respond` switches that make the simulator
/// answer with exactly these bytes.
fn crafted(pod: &PodSpec, which: &str, edit: impl FnOnce(&mut Value)) -> (TempDir, Vec<String>) {
    crafted_answer(pod, which, |body| edit(&mut body[0]))
}

/// [`crafted`], with `edit` applied to the whole answer (every VMI of it).
fn crafted_answer(
    pod: &PodSpec,
    which: &str,
    edit: impl FnOnce(&mut Value),
) -> (TempDir, Vec<String>) {
    let honest = Sim::start(&[pod], &[]);
    let files = TempDir::new();
    let cfg = format!("/vm-cfg/{}", pod.vm_name());
    let ip = format!("/vm/{}/{}", pod.uuid, pod.vmis[0].uuid);
    let mut edit = Some(edit);
    let mut args = Vec::new();
    for (name, path) in [("vm-cfg", &cfg), ("vm", &ip)] {
        let url = format!("http://127.0.0.1:{}{path}", honest.port);
        if name == "vm" {
            honest.register(pod, 0, &host_ifname(&pod.vmis[0].uuid), "eth0");
        }
        let text = ureq::get(&url).call().unwrap().body_mut().read_to_string();
        let mut body: Value = serde_json::from_str(&text.unwrap()).unwrap();
        if let Some(edit) = edit.take_if(|_| name == which) {
            edit(&mut body);
        }
        let file = files.0.join(format!("{name}.json"));
        std::fs::write(&file, body.to_string()).unwrap();
        args.push("--respond".to_string());
        args.push(format!("GET:{path}:200:{}", file.display()));
    }
    (files, args)
}

/// Sets annotation `key` of a VMI in a `/vm-cfg` answer to `value`.
fn annotate(vmi: &mut Value, key: &str, value: &str) {
    let annotations = vmi["annotations"].as_array_mut().unwrap();
    annotations.retain(|a| !a.as_str().unwrap().starts_with(&format!("{{{key}:")));
    annotations.push(json!(format!("{{{key}:{value}}}")));
}
