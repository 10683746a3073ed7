//! The agent's HTTP/1.1 quirks: an answer that cannot have a body, a signed Content-Length,
//! `Connection: keep-alive, close`, chunked answers, an answer over 1 MiB (refused unread), and
//! a state file that tries to put a header into a request.

use std::time::Duration;

use contrail_testkit::*;
use serde_json::json;

use super::{Case, POLL_TIMEOUT, ROOMY, SLACK, one_vmi_pod, poll_timeout, timed};

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
    c.fx.node.cni("STATUS").run(&conf).assert_ok();
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
    let (out, took) = timed(|| {
        fx.node
            .cni("DEL")
            .container(&cid)
            .ifname("eth0")
            .args(&args)
            .run(&conf)
    });
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
