//! A misbehaving vRouter agent: hanging, slow, failing, garbled, truncated and hostile answers
//! (the simulator's fault switches). Each ADD must fail with the right code within its bound,
//! say what to look at, and leave nothing behind; DEL must work without a usable agent.

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

// ---------------------------------------------------------------- transport and status faults

#[test]
fn agent_accepting_and_never_answering_times_out_with_code_11() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--hang", "GET:/vm-cfg/"]);
    let path = format!("GET /vm-cfg/{}", pod.vm_name());
    let msg = c.add_fails(11, add_bound(), &[&c.agent(), "waiting for", &path]);
    assert!(msg.contains("every interface of pod"), "{msg}");
    assert!(
        msg.contains("timeout") || msg.contains("timed out"),
        "{msg}"
    );
}

#[test]
fn agent_slower_than_the_request_timeout_times_out_with_code_11() {
    let pod = one_vmi_pod();
    // Each answer comes 0.5 s after its request, each request gives up after 0.2 s.
    let mut c = Case::new(pod.clone(), &["--delay-ms", "500"]);
    let path = format!("GET /vm-cfg/{}", pod.vm_name());
    let msg = c.add_fails(11, add_bound(), &[&c.agent(), "waiting for", &path]);
    assert!(
        msg.contains("timeout") || msg.contains("timed out"),
        "{msg}"
    );
}

#[test]
fn http_500_on_vm_cfg_times_out_with_code_11() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--fail", "GET:/vm-cfg/:500"]);
    let path = format!("GET /vm-cfg/{}", pod.vm_name());
    c.add_fails(
        11,
        add_bound(),
        &[&c.agent(), "waiting for", &path, "HTTP 500"],
    );
}

#[test]
fn malformed_json_on_vm_cfg_ends_the_wait_with_code_6() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--garbage", "GET:/vm-cfg/"]);
    // A budget of 20 s: failing well within it shows that garbage is not waited out.
    c.fx.set("poll-retries", json!(100));
    let path = format!("GET /vm-cfg/{}", pod.vm_name());
    let msg = c.add_fails(6, Duration::ZERO, &[&c.agent(), &path]);
    assert!(msg.contains("invalid JSON"), "{msg}");
}

#[test]
fn truncated_answer_on_vm_cfg_is_retried_then_code_11() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--truncate", "GET:/vm-cfg/"]);
    let path = format!("GET /vm-cfg/{}", pod.vm_name());
    c.add_fails(11, add_bound(), &[&c.agent(), "waiting for", &path]);
}

#[test]
fn hang_on_the_ip_config_rolls_the_claim_back() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--hang", "GET:/vm/"]);
    let path = format!("GET /vm/{}/{}", pod.uuid, pod.vmis[0].uuid);
    let msg = c.add_fails(11, add_bound(), &[&c.agent(), "waiting for", &path]);
    assert!(msg.contains("IP address of VMI"), "{msg}");
}

#[test]
fn a_deregistration_the_agent_never_answers_is_recorded_and_finished_later() {
    // The IP configuration never comes and the rollback's DELETE hangs too: the ADD still ends
    // within its bound, and the registration it could not drop is recorded, not forgotten.
    let pod = one_vmi_pod();
    let mut c = Case::new(
        pod.clone(),
        &["--hang", "GET:/vm/", "--hang", "DELETE:/vm/"],
    );
    let (out, took) = c.call("ADD", None);
    assert_eq!(out.code(), 11, "{}", out.stdout);
    assert!(took < add_bound() + SLACK, "took {took:?}");
    assert_eq!(c.fx.ns.ifnames(), ["lo"]);
    assert!(!host_link_exists(&host_ifname(&pod.vmis[0].uuid)));
    assert_eq!(c.fx.node.state_files(&pod), [] as [String; 0]);
    let ports = c.fx.sim.ports();
    assert_eq!(ports.len(), 1, "the agent never processed the DELETE");
    assert_eq!(c.fx.node.pending(&pod), [pod.vmis[0].uuid.clone()]);
    assert_eq!(c.fx.node.reservations(&pod), [pod.vmis[0].uuid.clone()]);
    // The agent recovers; Multus's DEL of the failed delegate finishes the deregistration.
    c.fx.restart_agent(&[]);
    c.ok("DEL", None);
    c.assert_nothing_left();
}

#[test]
fn garbage_on_the_ip_config_rolls_the_claim_back_with_code_6() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--garbage", "GET:/vm/"]);
    let path = format!("GET /vm/{}/{}", pod.uuid, pod.vmis[0].uuid);
    let msg = c.add_fails(6, add_bound(), &[&c.agent(), &path]);
    assert!(msg.contains("invalid JSON"), "{msg}");
}

#[test]
fn registration_whose_answer_is_cut_off_is_rolled_back_and_deregistered() {
    // The agent registers the port, but the plugin never learns it did: the rollback must
    // remove the interface and deregister the pod, or the agent keeps a port with no veth.
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--truncate", "POST:/vm"]);
    let msg = c.add_fails(
        11,
        add_bound(),
        &[&c.agent(), "waiting for", "POST /vm", &pod.vmis[0].uuid],
    );
    assert!(msg.contains(&host_ifname(&pod.vmis[0].uuid)), "{msg}");
}

#[test]
fn many_attachments_of_one_network_with_a_hanging_agent_stay_within_the_bound() {
    // Telling repeated attachments of one network apart asks the agent about the VMI to take;
    // with every such request hanging (and the IP wait after it), the ADD must still end within
    // poll-timeout x poll-retries (here 1 s).
    let mut vmis = vec![VmiSpec::new("default", 1)];
    vmis.extend((2..18).map(|n| VmiSpec::new("net-a", n)));
    let pod = PodSpec::new(vmis);
    let mut c = Case::new(pod, &["--hang", "GET:/vm/"]);
    c.fx.set("poll-timeout", json!(0.5))
        .set("poll-retries", json!(2));
    let bound = Duration::from_millis(500 * 2 + 500);
    let conf = c.fx.conf("net-a");
    let (out, took) = timed(|| c.fx.call("ADD", "net1", &conf));
    assert_eq!(out.code(), 11, "{}", out.stdout);
    let msg = out.msg();
    assert!(
        took < bound + SLACK,
        "took {took:?}, bound {bound:?}: {msg}"
    );
    assert!(
        msg.contains(&c.agent()) && msg.contains("waiting for"),
        "{msg}"
    );
    c.fx.assert_rolled_back();
}

// ---------------------------------------------------------------- hostile answers

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

fn hostile_case(pod: PodSpec, which: &str, edit: impl FnOnce(&mut Value)) -> Case {
    let (files, args) = crafted(&pod, which, edit);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Case::with_files(pod, files, &args)
}

/// ADD against a hostile answer on `which` ("vm-cfg", or "vm" after the claim): code 6 at
/// once, naming the agent, the request and `words` (the field and the kind of problem), never
/// quoting the `foreign` bytes of the answer, with nothing left behind.
#[track_caller]
fn hostile(
    pod: &PodSpec,
    which: &str,
    edit: impl FnOnce(&mut Value),
    words: &[&str],
    foreign: Option<&str>,
) -> String {
    let mut c = hostile_case(pod.clone(), which, edit);
    let path = match which {
        "vm-cfg" => format!("GET /vm-cfg/{}", pod.vm_name()),
        _ => format!("GET /vm/{}/{}", pod.uuid, pod.vmis[0].uuid),
    };
    let agent = c.agent();
    let mut all = vec![agent.as_str(), path.as_str()];
    all.extend_from_slice(words);
    let msg = c.add_fails(6, add_bound(), &all);
    if let Some(foreign) = foreign {
        assert!(
            !msg.contains(foreign),
            "the message quotes the answer's {foreign:?}: {msg}"
        );
    }
    msg
}

/// One field of the VMI's object in the answer on `which` set to `value`.
#[track_caller]
fn hostile_field(pod: &PodSpec, which: &str, key: &str, value: &str, words: &[&str]) {
    // A number is not looked for in the message: its digits may be in a uuid or a port.
    let v: Value = serde_json::from_str(value).unwrap_or_else(|_| json!(value));
    let foreign = (!v.is_number()).then_some(value);
    hostile(pod, which, |vmi| vmi[key] = v, words, foreign);
}

#[test]
fn crafted_answers_equal_to_the_agents_own_work() {
    // The control for the hostile cases: the same mechanism with nothing edited succeeds, and
    // the host end is the one `host_ifname` computes.
    let pod = one_vmi_pod();
    let mut c = hostile_case(pod.clone(), "", |_| {});
    let r = c.ok("ADD", None).json();
    assert_eq!(r["interfaces"][0]["name"], host_ifname(&pod.vmis[0].uuid));
    assert_eq!(c.fx.ns.mac("eth0"), pod.vmis[0].mac);
    c.ok("DEL", Some(&r));
    c.assert_nothing_left();
}

#[test]
fn vmi_id_with_path_components_is_refused() {
    let pod = one_vmi_pod();
    // From the pod's state dir (<tmp>/ck8s-test-*/ports/<vm-name>), `../../../x` is <tmp>/x.
    let tmp = std::env::temp_dir();
    let injected = format!("ck8s-injected-{}", tag());
    let passwd = std::fs::read("/etc/passwd").unwrap();
    for id in [
        "../../../etc/passwd".to_string(),
        format!("../../../{injected}"),
        tmp.join(&injected).display().to_string(),
    ] {
        hostile_field(
            &pod,
            "vm-cfg",
            "id",
            &id,
            &["whose id is not a lowercase uuid"],
        );
        for p in [tmp.join("etc/passwd"), tmp.join(&injected)] {
            assert!(!p.exists(), "{} was created for id {id:?}", p.display());
        }
        assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);
        assert!(!host_link_exists(&host_ifname(&id)));
    }
}

#[test]
fn uppercase_vmi_id_is_refused() {
    let pod = one_vmi_pod();
    let upper = pod.vmis[0].uuid.to_uppercase();
    hostile_field(
        &pod,
        "vm-cfg",
        "id",
        &upper,
        &["whose id is not a lowercase uuid"],
    );
}

#[test]
fn multicast_mac_in_vm_cfg_is_refused() {
    let words = ["whose mac-address is not a unicast MAC"];
    hostile_field(
        &one_vmi_pod(),
        "vm-cfg",
        "mac-address",
        "01:00:5e:00:00:01",
        &words,
    );
}

/// Sets annotation `key` of a VMI in a `/vm-cfg` answer to `value`.
fn annotate(vmi: &mut Value, key: &str, value: &str) {
    let annotations = vmi["annotations"].as_array_mut().unwrap();
    annotations.retain(|a| !a.as_str().unwrap().starts_with(&format!("{{{key}:")));
    annotations.push(json!(format!("{{{key}:{value}}}")));
}

#[test]
fn index_beyond_the_count_is_refused() {
    let set_index = |vmi: &mut Value| annotate(vmi, "index", "5/2");
    let words = ["whose index annotation is not k/N"];
    hostile(&one_vmi_pod(), "vm-cfg", set_index, &words, Some("5/2"));
}

#[test]
fn prefix_length_33_is_refused() {
    hostile_field(
        &one_vmi_pod(),
        "vm",
        "plen",
        "33",
        &["whose plen is not 1..=32"],
    );
}

#[test]
fn ipv4_address_out_of_range_is_refused() {
    let words = ["whose ip-address is not an address"];
    hostile_field(&one_vmi_pod(), "vm", "ip-address", "300.1.1.1", &words);
}

#[test]
fn ipv6_prefix_length_200_is_refused() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1).dual_stack()]);
    hostile_field(
        &pod,
        "vm",
        "v6-plen",
        "200",
        &["whose v6-plen is not 1..=128"],
    );
}

#[test]
fn all_zero_mac_in_the_ip_config_is_refused() {
    let words = ["whose mac-address is not a unicast MAC"];
    hostile_field(
        &one_vmi_pod(),
        "vm",
        "mac-address",
        "00:00:00:00:00:00",
        &words,
    );
}

// ---------------------------------------------------------------- HTTP quirks

/// An HTTP/1.1 answer: the status line, `headers`, an empty line, `body`.
fn http_answer(status: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let head: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    [format!("HTTP/1.1 {status}\r\n{head}\r\n").as_bytes(), body].concat()
}

/// The pod's `/vm-cfg` body, as an unfaulted agent sends it.
fn cfg_body(pod: &PodSpec) -> String {
    let honest = Sim::start(&[pod], &[]);
    honest
        .get(&format!("/vm-cfg/{}", pod.vm_name()))
        .to_string()
}

#[test]
fn an_answer_that_cannot_have_a_body_is_taken_at_once() {
    // A 204 has no body whatever its headers say (RFC 9112 6.3): nothing to wait for.
    let pod = one_vmi_pod();
    let no_content = http_answer("204 No Content", &[], b"");
    let mut c = Case::raw(pod.clone(), "GET:/vm-cfg/", &no_content);
    // STATUS takes any status as an answer; its one request may take min(poll-timeout, 2 s):
    // one that waited for a body would time out, and STATUS would fail.
    c.fx.set("poll-timeout", json!(2));
    let conf = c.fx.node.netconf("1.1.0", "contrail-k8s-cni");
    c.fx.node.call("STATUS", "", "", "", "", &conf).assert_ok();
    // ADD: a 204 is not the contract's 200 for /vm-cfg, so it is polled again like a 500
    // until the deadline; each poll is answered at once, none is waited out. Over 20 polls'
    // worth of deadline, polls answered at once come every 21 ms (some 190 of them, or a few
    // dozen on a busy machine), polls that waited out their timeout at most 20 (and the 3
    // early ones).
    let retries = 20;
    c.fx.set("poll-timeout", json!(POLL_TIMEOUT))
        .set("poll-retries", json!(retries));
    let path = format!("/vm-cfg/{}", pod.vm_name());
    let request = format!("GET {path}");
    let bound = poll_timeout() * retries + poll_timeout();
    let msg = c.add_fails(11, bound, &[&c.agent(), &request, "HTTP 204"]);
    assert!(!msg.contains("timed out"), "{msg}");
    let polls = c.connections("GET", &path).len();
    assert!(
        polls > retries as usize + 5,
        "{polls} polls in poll-timeout x poll-retries: they waited for a body"
    );
}

#[test]
fn a_content_length_with_a_sign_is_refused_with_code_6() {
    // Content-Length is 1*DIGIT (RFC 9110 8.6): "+N" is framing this plugin cannot trust. An
    // answer that breaks HTTP is refused at once like one that breaks the agent's contract
    // (code 6), not polled again until the deadline as if the agent were not ready (code 11):
    // asking again gets the same bytes.
    let pod = one_vmi_pod();
    let body = cfg_body(&pod);
    let length = format!("Content-Length: +{}", body.len());
    let headers = ["Content-Type: application/json", length.as_str()];
    let answer = http_answer("200 OK", &headers, body.as_bytes());
    let mut c = Case::raw(pod.clone(), "GET:/vm-cfg/", &answer);
    // A budget of 20 s: failing well within it shows that the answer is not polled again.
    c.fx.set("poll-retries", json!(100));
    let request = format!("GET /vm-cfg/{}", pod.vm_name());
    let msg = c.add_fails(6, Duration::ZERO, &[&c.agent(), &request, "HTTP/1.1"]);
    assert!(msg.to_lowercase().contains("content-length"), "{msg}");
}

#[test]
fn connection_keep_alive_close_closes_the_connection() {
    // "close" among the Connection options ends the connection (RFC 9112 9.6): the call's next
    // request goes on a new one, which later requests then share.
    let pod = one_vmi_pod();
    let body = cfg_body(&pod);
    let length = format!("Content-Length: {}", body.len());
    let headers = [
        "Content-Type: application/json",
        length.as_str(),
        "Connection: keep-alive, close",
    ];
    let answer = http_answer("200 OK", &headers, body.as_bytes());
    let mut c = Case::raw(pod.clone(), "GET:/vm-cfg/", &answer);
    let r = c.ok("ADD", None).json();
    let cfg = c.connections("GET", "/vm-cfg/");
    let post = c.connections("POST", "/vm");
    let ip = c.connections("GET", "/vm/");
    assert_eq!((cfg.len(), post.len()), (1, 1), "{:?}", c.received());
    assert_ne!(
        cfg, post,
        "POST /vm went on the connection the agent closed"
    );
    assert!(
        !ip.is_empty() && ip.iter().all(|conn| *conn == post[0]),
        "the call's later requests share one kept-alive connection: {:?}",
        c.received()
    );
    c.ok("DEL", Some(&r));
    c.assert_nothing_left();
}

#[test]
fn chunked_answers_are_read() {
    // The agent sends a Content-Length, but an HTTP/1.1 server may chunk any answer.
    let pod = one_vmi_pod();
    let body = cfg_body(&pod);
    let (a, b) = body.split_at(body.len() / 2);
    let chunked = format!("{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n", a.len(), b.len());
    let headers = [
        "Content-Type: application/json",
        "Transfer-Encoding: chunked",
    ];
    let answer = http_answer("200 OK", &headers, chunked.as_bytes());
    let mut c = Case::raw(pod.clone(), "GET:/vm-cfg/", &answer);
    let r = c.ok("ADD", None).json();
    assert_eq!(c.fx.ns.mac("eth0"), pod.vmis[0].mac);
    // The connection stays in use after the last chunk.
    let post = c.connections("POST", "/vm");
    assert_eq!(c.connections("GET", "/vm-cfg/"), post);
    c.ok("DEL", Some(&r));
    c.assert_nothing_left();
}

#[test]
fn an_answer_larger_than_1_mib_is_refused_unread_with_code_6() {
    // 32 MiB: more than the 1 MiB an answer may have plus what loopback's socket buffers hold
    // (a few MiB), so a client that reads it all is seen to.
    const BIG: usize = 32 << 20;
    let pod = one_vmi_pod();
    let padding = vec![b' '; BIG];
    let declared = format!("Content-Length: {BIG}");
    // Its length said, or the body ending with the connection.
    for framing in [declared.as_str(), "Connection: close"] {
        let answer = http_answer("200 OK", &[framing], &padding);
        let mut c = Case::raw(pod.clone(), "GET:/vm-cfg/", &answer);
        // A budget of 20 s, and 2 s for the one request: however slowly a busy machine
        // sends the first MiB, the request is not timed out and asked again.
        c.fx.set("poll-timeout", json!(2))
            .set("poll-retries", json!(10));
        let request = format!("GET /vm-cfg/{}", pod.vm_name());
        c.add_fails(6, Duration::ZERO, &[&c.agent(), &request, "1048576 bytes"]);
        let sent = || -> Vec<u64> {
            let log = c.received();
            let raw = log
                .iter()
                .filter(|r| r["path"].as_str().unwrap().starts_with("/vm-cfg/"));
            raw.map(|r| r["raw-sent"].as_u64().unwrap_or(u64::MAX))
                .collect()
        };
        // The simulator notes what went out once the client is gone.
        wait_for("the simulator's count", Duration::from_secs(10), || {
            sent().iter().all(|n| *n != u64::MAX)
        });
        let sent = sent();
        eprintln!("{framing}: {sent:?} of {BIG} bytes went out");
        assert_eq!(sent.len(), 1, "{framing}: asked again: {sent:?}");
        assert!(
            sent[0] < BIG as u64 / 2,
            "{framing}: the plugin read {sent:?} bytes"
        );
    }
}

#[test]
fn a_state_file_cannot_put_a_header_into_a_request() {
    // Pod B is up. Pod A's state file names, as its vm-uuid, B's uuid and a header of its own:
    // sent as it is, A's DEL would be `DELETE /vm/<B's uuid>` and drop B's registration. The
    // record is refused as unreadable, and nothing of it reaches the agent.
    let victim = one_vmi_pod();
    let forger = one_vmi_pod();
    let sim = Sim::start(&[&victim], &["--log-requests"]);
    let mut fx = Fixture {
        pod: victim.clone(),
        node: Node::new(&sim),
        sim,
        ns: Netns::new(),
        cid: uuid(),
    };
    fx.set("poll-timeout", json!(ROOMY.0))
        .set("poll-retries", json!(ROOMY.1));
    let r = fx.add("eth0", "default");
    let vmi = &forger.vmis[0];
    let forged = format!(
        "{} HTTP/1.1\r\nX-Injected: from-a-state-file\r\nX-Pad: x",
        victim.uuid
    );
    let cid = uuid();
    let record = json!({"vm-id": cid, "vm-uuid": forged, "vm-name": forger.vm_name(),
        "host-ifname": host_ifname(&vmi.uuid), "vm-ifname": "eth0", "vm-namespace": "",
        "vn-uuid": uuid(), "vmi-uuid": vmi.uuid, "contrail-k8s-cni-state": "1",
        "network": "default", "mac-address": vmi.mac, "default-gw": "true"})
    .to_string();
    let dir = fx.node.ports_dir().join(forger.vm_name());
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(&vmi.uuid);
    std::fs::write(&file, &record).unwrap();

    // A's DEL, as its runtime sends it; then GC, which keeps B's sandbox.
    let conf = fx.conf("default");
    let args = forger.multus_args(&cid);
    let (out, took) = timed(|| fx.node.call("DEL", &cid, "", "eth0", &args, &conf));
    out.assert_ok();
    // Refused as unreadable: nothing to ask the agent, nothing to wait for.
    assert!(took < SLACK, "DEL took {took:?}");
    let valid = json!([{"containerID": fx.cid, "ifname": "eth0"}]);
    fx.node.gc(valid).assert_ok();

    let requests: Vec<String> = fx
        .sim
        .get("/sim/log")
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["method"].as_str().unwrap(),
                r["path"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        !requests.iter().any(|r| r.starts_with("DELETE")),
        "the forged record reached the agent: {requests:?}"
    );
    assert_eq!(fx.sim.ports().len(), 1, "B lost its registration");
    fx.check("eth0", "default", &r).assert_ok();
    // Left alone, byte for byte, and reported.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), record);
    let rows = fx.node.inspect();
    let health: Vec<&str> = rows.iter().map(|r| r["health"].as_str().unwrap()).collect();
    assert!(
        health
            .iter()
            .any(|h| h.contains("unreadable state file") && h.contains("vm-uuid")),
        "{health:?}"
    );
    assert!(
        !health.iter().any(|h| h.contains("X-Injected")),
        "{health:?}"
    );
    fx.del("eth0", "default").assert_ok();
    std::fs::remove_dir_all(&dir).unwrap();
    fx.assert_nothing_left();
}

// ---------------------------------------------------------------- DEL and CHECK

#[test]
fn del_without_the_agent_tears_down_locally() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &[]);
    let r = c.ok("ADD", None).json();
    let tap = host_ifname(&pod.vmis[0].uuid);
    assert!(host_link_exists(&tap));
    let agent = c.agent();
    // The agent goes away (restarting, crashed): nothing listens on its port any more.
    c.fx.stop_agent();

    // CHECK cannot confirm the registration: it fails, naming the agent, and changes nothing.
    let (out, took) = c.call("CHECK", Some(&r));
    assert_eq!(out.code(), 11, "{}", out.stdout);
    assert!(out.msg().contains(&agent), "{}", out.msg());
    assert!(took < poll_timeout() + SLACK, "{took:?}");
    assert_eq!(c.fx.ns.ifnames(), ["eth0", "lo"]);

    // DEL tears down locally at once; the deregistration is retried within the call's
    // deadline, then recorded for the next call for the pod or GC.
    let (out, took) = c.call("DEL", Some(&r));
    out.assert_ok();
    assert!(took < add_bound() + SLACK, "{took:?}");
    assert_eq!(c.fx.ns.ifnames(), ["lo"]);
    assert!(!host_link_exists(&tap));
    assert_eq!(c.fx.node.state_files(&pod), [] as [String; 0]);
    assert_eq!(c.fx.node.pending(&pod), [pod.vmis[0].uuid.clone()]);
    let log = std::fs::read_to_string(c.fx.node.config_dir.0.join("cni.log")).unwrap();
    assert!(log.contains("left registered with the agent"), "{log}");

    // Nothing is recorded any more: CHECK fails, a repeated DEL succeeds.
    let (out, _) = c.call("CHECK", Some(&r));
    assert_eq!(out.code(), 103, "{}", out.stdout);
    c.call("DEL", Some(&r)).0.assert_ok();
}

#[test]
fn del_with_a_hanging_agent_finishes_in_time() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--hang", "DELETE:/vm/"]);
    let r = c.ok("ADD", None).json();
    let (out, took) = c.call("DEL", Some(&r));
    out.assert_ok();
    // The deregistration is retried within poll-timeout x poll-retries, no longer.
    assert!(took < add_bound() + SLACK, "{took:?}");
    assert_eq!(c.fx.ns.ifnames(), ["lo"]);
    assert!(!host_link_exists(&host_ifname(&pod.vmis[0].uuid)));
    assert_eq!(c.fx.node.state_files(&pod), [] as [String; 0]);
    let log = std::fs::read_to_string(c.fx.node.config_dir.0.join("cni.log")).unwrap();
    assert!(log.contains("left registered with the agent"), "{log}");
    // The agent never processed the DELETE: the port is still registered there, and the
    // node says so until a later call gets the DELETE through.
    let ports = c.fx.sim.ports();
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(c.fx.node.pending(&pod), [pod.vmis[0].uuid.clone()]);
    c.call("DEL", Some(&r)).0.assert_ok();
}

#[test]
fn vmis_that_cannot_be_one_pods_are_refused_at_once() {
    // Two VMIs with one index, or announcing different counts, never become a whole pod:
    // refused at once with code 6 naming the problem, not waited for until the deadline.
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let cases: [(&str, &str, &str); 2] = [
        ("0/2", "0/2", "repeats the index of another VMI"),
        ("0/2", "1/3", "announces another count of interfaces"),
    ];
    for (first, second, words) in cases {
        let (files, args) = crafted_answer(&pod, "vm-cfg", |body| {
            annotate(&mut body[0], "index", first);
            annotate(&mut body[1], "index", second);
        });
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut c = Case::with_files(pod.clone(), files, &args);
        // At once: well within one poll-timeout, where waiting takes all of poll-retries.
        c.add_fails(6, poll_timeout(), &[words, "index annotation"]);
    }
}

#[test]
fn default_gw_takes_yes_or_no_and_ignores_other_values() {
    // A `default-gw` of "no" on net-a's VMI is no: the cluster network's eth0 gets the pod's
    // default route. A value that is neither is ignored, and said so in the log.
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    for value in ["no", "perhaps"] {
        let net_a = pod.vmis[1].uuid.clone();
        let (files, args) = crafted_answer(&pod, "vm-cfg", |body| {
            for vmi in body.as_array_mut().unwrap() {
                if vmi["id"] == net_a.as_str() {
                    annotate(vmi, "default-gw", value);
                }
            }
        });
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut c = Case::with_files(pod.clone(), files, &args);
        let r = c.ok("ADD", None).json();
        let defaults = c.fx.ns.default_routes();
        assert!(
            defaults
                .iter()
                .any(|(family, _, dev)| family == "-4" && dev == "eth0"),
            "{value}: {defaults:?}"
        );
        if value == "perhaps" {
            let log = c.fx.node.log();
            assert!(log.contains("ignoring its default-gw annotation"), "{log}");
        }
        c.ok("DEL", Some(&r));
        c.assert_nothing_left();
    }
}

#[test]
fn an_error_object_escapes_and_bounds_what_an_answer_carries() {
    // kube-manager copies the pod's network selection into the VMI's `network` annotation:
    // runtimes put the error message into pod events that people read.
    let pod = one_vmi_pod();
    let hostile = format!("evil\u{1b}[2J\nADD ok in 0.1 ms {}", "A".repeat(20_000));
    let (files, args) = crafted(&pod, "vm-cfg", |vmi| annotate(vmi, "network", &hostile));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut c = Case::with_files(pod, files, &args);
    let out = c.fx.call("ADD", "eth0", &c.fx.conf("net-a"));
    assert_eq!(out.code(), 101, "{}", out.stdout);
    let msg = out.msg();
    assert!(!msg.chars().any(char::is_control), "{msg:?}");
    assert!(msg.contains("evil\\u{1b}[2J\\nADD ok"), "{msg}");
    assert!(
        msg.chars().count() < 2100,
        "{} characters",
        msg.chars().count()
    );
    c.ok("DEL", None);
    c.assert_nothing_left();
}

// ---------------------------------------------------------------- hostile strings, generated

/// What an agent's answer may carry that a tenant wrote (kube-manager copies a pod's network
/// selection into annotations) or that is simply broken: path tricks, request smuggling, line
/// and terminal control, NUL, a flood, bidirectional overrides, shell words, nothing at all.
const HOSTILE: [&str; 12] = [
    "../../../etc/passwd",
    "a/b",
    "x\r\nHost: evil",
    "line\nforged ADD ok in 0.1 ms",
    "\u{1b}[2J\u{1b}[31mred",
    "nul\u{0}byte",
    "%2e%2e%2f%0d%0a",
    "\u{202e}txt.exe",
    "'; rm -rf / #",
    "",
    " ",
    "\u{1f642}é",
];

/// Fields of one VMI in `/vm-cfg` (`@` marks an annotation) and in its IP configuration.
const CFG_FIELDS: [&str; 12] = [
    "id",
    "vm-uuid",
    "vn-id",
    "mac-address",
    "vlan-id",
    "@network",
    "@namespace",
    "@name",
    "@index",
    "@interface",
    "@default-gw",
    "@cluster",
];
const IP_FIELDS: [&str; 11] = [
    "ip-address",
    "plen",
    "gateway",
    "dns-server",
    "v6-ip-address",
    "v6-gateway",
    "v6-dns-server",
    "system-name",
    "instance-id",
    "mac-address",
    "rx-vlan-id",
];

/// One generated case: a hostile string in one field of one answer, drawn from `seed`.
fn hostile_string_case(seed: u64) -> (&'static str, &'static str, String) {
    let mut rng = Rng(seed);
    let which = if rng.chance(50) { "vm-cfg" } else { "vm" };
    let fields: &[&str] = if which == "vm-cfg" {
        &CFG_FIELDS
    } else {
        &IP_FIELDS
    };
    let field = *rng.pick(fields);
    let mut value = rng.pick(&HOSTILE).to_string();
    if rng.chance(15) {
        value = value.repeat(1 + 20_000 / value.len().max(1));
    }
    (which, field, value)
}

/// Whatever the hostile string, the call ends within its bound; a refusal is an error object
/// with a known code whose message is escaped and bounded; the node's log stays one line per
/// record, without control characters; the registrations follow the state files; its DEL
/// leaves nothing.
fn hostile_string(seed: u64) {
    let (which, field, value) = hostile_string_case(seed);
    let pod = one_vmi_pod();
    let edit = |vmi: &mut Value| match field.strip_prefix('@') {
        Some(key) => annotate(vmi, key, &value),
        None => vmi[field] = json!(value),
    };
    let mut c = hostile_case(pod, which, edit);
    let (out, took) = c.call("ADD", None);
    assert!(took < add_bound() + SLACK, "took {took:?}");
    if !out.ok {
        assert!([6, 7, 11, 101, 102].contains(&out.code()), "{}", out.stdout);
        let msg = out.msg();
        assert!(!msg.chars().any(char::is_control), "{msg:?}");
        assert!(msg.chars().count() < 2100, "{} characters", msg.len());
    }
    c.fx.assert_registrations_follow_files();
    let log = c.fx.node.log();
    for line in log.lines() {
        assert!(!line.chars().any(char::is_control), "{line:?}");
        // A record of at most 8 KiB, after its timestamp and level, and the cut's mark.
        assert!(
            line.len() <= 8 * 1024 + 128,
            "a line of {} bytes",
            line.len()
        );
    }
    c.ok("DEL", None);
    c.assert_nothing_left();
}

fn hostile_strings(shard: u64) {
    for_each_seed(
        "CONTRAIL_HOSTILE_SEED",
        "faults::hostile_strings",
        6,
        shard,
        |seed| {
            let (which, field, value) = hostile_string_case(seed);
            let shown: String = value.chars().take(40).collect();
            format!("{which} {field}: {shown:?} ({} bytes)", value.len())
        },
        hostile_string,
    );
}

#[test]
fn hostile_strings_0() {
    hostile_strings(0);
}

#[test]
fn hostile_strings_1() {
    hostile_strings(1);
}

#[test]
fn hostile_strings_2() {
    hostile_strings(2);
}
