//! The simulator's `POST /port` (the agent's Nova path, `port_ipc_handler.cc`
//! `MakeAddVmiUuidRequest`), `GET /port/<vmi>`, `DELETE /port/<vmi>`, and its DPDK mode: a
//! vrouter-dpdk stand-in per vhost-user port that connects to `<vr-socket-dir>/uvh_vif_<name>`.

use std::io::Read;
use std::os::unix::fs::symlink;
use std::os::unix::net::UnixListener;
use std::time::Duration;

use contrail_testkit::*;
use serde_json::{Value, json};

const NIL: &str = "00000000-0000-0000-0000-000000000000";
const BOUND: Duration = Duration::from_secs(10);

/// One request on a fresh connection: (status code, body as JSON).
fn call(sim: &Sim, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let (status, body) = exchange(&mut sim.connect(), method, path, body);
    let code = status.split(' ').nth(1).unwrap().parse().unwrap();
    (code, serde_json::from_str(&body).unwrap())
}

/// One request with a body of raw bytes.
fn call_raw(sim: &Sim, path: &str, body: &str) -> (u16, Value) {
    let (status, answer) = exchange_raw(&mut sim.connect(), "POST", path, body);
    let code = status.split(' ').nth(1).unwrap().parse().unwrap();
    (code, serde_json::from_str(&answer).unwrap())
}

fn vn_of(sim: &Sim, pod: &PodSpec, k: usize) -> Value {
    let (_, cfg) = call(sim, "GET", &format!("/vm-cfg/{}", pod.vm_name()), None);
    let cfg = cfg.as_array().unwrap();
    let vmi = cfg.iter().find(|v| v["id"] == pod.vmis[k].uuid.as_str());
    vmi.unwrap()["vn-id"].clone()
}

/// A `POST /port` body for VMI `k` with every field the agent requires.
fn nova(sim: &Sim, pod: &PodSpec, k: usize, system_name: &str) -> Value {
    json!({"id": pod.vmis[k].uuid, "instance-id": pod.uuid, "vn-id": vn_of(sim, pod, k),
           "vm-project-id": NIL, "display-name": pod.vm_name(), "ip-address": "0.0.0.0",
           "ip6-address": "", "system-name": system_name, "mac-address": pod.vmis[k].mac,
           "type": 0, "rx-vlan-id": -1, "tx-vlan-id": -1, "vhostuser-mode": 1})
}

/// A `POST /vm` body for VMI `k`.
fn cni(sim: &Sim, pod: &PodSpec, k: usize, host: &str) -> Value {
    json!({"vm-uuid": pod.uuid, "vm-name": pod.vm_name(), "vm-id": "c1", "host-ifname": host,
           "vm-ifname": format!("net{k}"), "vn-uuid": vn_of(sim, pod, k),
           "vmi-uuid": pod.vmis[k].uuid})
}

fn two_vmi_pod() -> PodSpec {
    PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)])
}

fn port_path(pod: &PodSpec, k: usize) -> String {
    format!("/port/{}", pod.vmis[k].uuid)
}

fn ip_path(pod: &PodSpec, k: usize) -> String {
    format!("/vm/{}/{}", pod.uuid, pod.vmis[k].uuid)
}

/// The answer without its timestamp.
fn untimed(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("time");
    v
}

#[test]
fn post_port_registers_and_get_port_answers_the_ip_configuration() {
    let pod = two_vmi_pod();
    let sim = Sim::start(&[&pod], &[]);
    assert_eq!(call(&sim, "GET", &port_path(&pod, 1), None).0, 404);
    let (code, body) = call(&sim, "POST", "/port", Some(&nova(&sim, &pod, 1, "vhost0a")));
    assert_eq!((code, body), (200, json!({})));
    // The object alone (`GetPortInfo`), the one in GET /vm/<vm>/<vmi>'s array otherwise.
    let (code, port) = call(&sim, "GET", &port_path(&pod, 1), None);
    assert_eq!(code, 200, "{port}");
    assert_eq!(port["system-name"], "vhost0a");
    assert_eq!(port["vhostuser-mode"], 1);
    assert_eq!(
        (port["rx-vlan-id"].clone(), port["tx-vlan-id"].clone()),
        (json!(65535), json!(65535))
    );
    let ip = format!("{}/{}", port["ip-address"].as_str().unwrap(), port["plen"]);
    assert_eq!(ip, pod.vmis[1].addr());
    let (code, vm) = call(&sim, "GET", &ip_path(&pod, 1), None);
    assert_eq!(code, 200);
    assert_eq!(untimed(vm[0].clone()), untimed(port));
    // The other VMI is registered by neither route.
    assert_eq!(call(&sim, "GET", &port_path(&pod, 0), None).0, 404);
    // Upper-case uuids match no route.
    let upper = port_path(&pod, 1)
        .to_uppercase()
        .replace("/PORT/", "/port/");
    let (code, body) = call(&sim, "GET", &upper, None);
    assert_eq!((code, body), (404, json!({"error": "Unknown Request"})));
    let ports = sim.get("/sim/ports");
    assert_eq!(ports.as_array().unwrap().len(), 1, "{ports}");
    assert_eq!(ports[0]["sim-route"], "POST /port");
    assert_eq!(ports[0]["id"], pod.vmis[1].uuid.as_str());
    assert!(ports[0].get("sim-transport").is_none(), "no DPDK: {ports}");
    assert!(sim.violations().is_empty());
}

#[test]
fn post_port_refuses_what_the_agent_refuses_with_its_messages() {
    let pod = two_vmi_pod();
    let sim = Sim::start(&[&pod], &[]);
    let good = nova(&sim, &pod, 0, "vhost0b");
    let refused = |body: &Value, msg: &str| {
        let (code, answer) = call(&sim, "POST", "/port", Some(body));
        assert_eq!(
            (code, answer),
            (500, json!({"error": format!("{{ {msg} }}")})),
            "{body}"
        );
    };
    let uuids = ["id", "instance-id", "vn-id", "vm-project-id"];
    let strings = [
        "display-name",
        "ip-address",
        "ip6-address",
        "system-name",
        "mac-address",
    ];
    let ints = ["type", "rx-vlan-id", "tx-vlan-id"];
    for key in uuids.iter().chain(&strings).chain(&ints) {
        let what = if uuids.contains(key) { "data" } else { "field" };
        let msg = format!("Invalid or missing {what} for <{key}>");
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove(*key);
        refused(&missing, &msg);
        let wrong = if ints.contains(key) {
            json!("0")
        } else {
            json!(7)
        };
        for bad in [wrong, Value::Null] {
            let mut body = good.clone();
            body[*key] = bad;
            refused(&body, &msg);
        }
    }
    // Integers are 32-bit ints: no floats, nothing larger.
    for bad in [json!(0.0), json!(1u64 << 32)] {
        let mut body = good.clone();
        body["type"] = bad;
        refused(&body, "Invalid or missing field for <type>");
    }
    let with = |key: &str, value: Value| {
        let mut body = good.clone();
        body[key] = value;
        body
    };
    refused(&with("vn-id", json!(NIL)), "Invalid VN uuid");
    refused(&with("vn-id", json!("not-a-uuid")), "Invalid VN uuid");
    for mac in [
        "02:00:00:00:00",
        "00:00:00:00:00:00",
        "0x:11:22:33:44:55",
        "02-11-22-33-44-55",
    ] {
        refused(
            &with("mac-address", json!(mac)),
            "Invalid MAC, Use xx:xx:xx:xx:xx:xx format",
        );
    }
    let isolated = with("rx-vlan-id", json!(10));
    refused(
        &with_key(isolated, "tx-vlan-id", json!(0xFFFE)),
        "Invalid request. RX (isolated) vlan set, but TX vlan not set",
    );
    let (code, body) = call_raw(&sim, "/port", "{\"id\": ");
    assert_eq!(code, 500);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("{ Invalid Json string"),
        "{body}"
    );
    let (code, body) = call_raw(&sim, "/port", "\"a string\"");
    assert_eq!(code, 500);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("{ Unexpected Json string"),
        "{body}"
    );
    assert!(sim.get("/sim/ports").as_array().unwrap().is_empty());

    // An array is taken all or none, and answered 200 either way.
    let second = nova(&sim, &pod, 1, "vhost0c");
    let bad = with_key(second.clone(), "mac-address", json!("nope"));
    let (code, body) = call(&sim, "POST", "/port", Some(&json!([good, bad])));
    assert_eq!((code, body), (200, json!({})));
    assert!(sim.get("/sim/ports").as_array().unwrap().is_empty());
    // A bad vhostuser-mode is no refusal (the agent takes 0); a nil project is fine; a type
    // other than 1 and 2 is a VM port.
    let lenient = with_key(
        with_key(good.clone(), "vhostuser-mode", json!("x")),
        "type",
        json!(7),
    );
    let (code, _) = call(&sim, "POST", "/port", Some(&json!([lenient, second])));
    assert_eq!(code, 200);
    let ports = sim.get("/sim/ports");
    assert_eq!(ports.as_array().unwrap().len(), 2, "{ports}");
    let first = ports
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == good["id"])
        .unwrap();
    assert_eq!(
        (first["type"].clone(), first["vhostuser-mode"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(first["ip6-address"], "::");
    assert!(sim.violations().is_empty());
}

fn with_key(mut body: Value, key: &str, value: Value) -> Value {
    body[key] = value;
    body
}

#[test]
fn a_uuid_the_agent_takes_as_nil_is_a_violation() {
    let pod = two_vmi_pod();
    let sim = Sim::start(&[&pod], &[]);
    let body = with_key(
        nova(&sim, &pod, 0, "vhost0d"),
        "instance-id",
        json!("pod-1"),
    );
    assert_eq!(call(&sim, "POST", "/port", Some(&body)).0, 200);
    let violations = sim.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0]["why"]
            .as_str()
            .unwrap()
            .contains("instance-id")
    );
}

/// A simulator with the pod's VMI `vm.0` registered through `POST /vm` (as `vm.1`) and VMI
/// `port.0` through `POST /port` (as `port.1`).
fn both_routes(pod: &PodSpec, vm: (usize, &str), port: (usize, &str)) -> Sim {
    let sim = Sim::start(&[pod], &[]);
    call(&sim, "POST", "/vm", Some(&cni(&sim, pod, vm.0, vm.1)));
    call(
        &sim,
        "POST",
        "/port",
        Some(&nova(&sim, pod, port.0, port.1)),
    );
    sim
}

#[test]
fn each_route_deletes_only_its_own_registrations() {
    let pod = two_vmi_pod();
    let sim = both_routes(&pod, (0, "tapdddddddddddd"), (1, "vhost0e"));
    let both = format!("/vm/{}", pod.uuid);
    assert_eq!(
        call(&sim, "GET", &both, None).0,
        200,
        "both routes count for the whole pod"
    );
    // GET /port answers for a POST /vm port too: it only needs the interface entry.
    let (code, port) = call(&sim, "GET", &port_path(&pod, 0), None);
    assert_eq!(
        (code, port["system-name"].clone()),
        (200, json!("tapdddddddddddd"))
    );
    // DELETE /port of a POST /vm port drops nothing.
    assert_eq!(
        call(&sim, "DELETE", &port_path(&pod, 0), None),
        (200, json!({}))
    );
    assert_eq!(call(&sim, "GET", &ip_path(&pod, 0), None).0, 200);
    // DELETE /vm of the pod drops its POST /vm port only.
    assert_eq!(call(&sim, "DELETE", &both, None), (200, json!({})));
    assert_eq!(call(&sim, "GET", &ip_path(&pod, 0), None).0, 404);
    assert_eq!(call(&sim, "GET", &port_path(&pod, 1), None).0, 200);
    assert_eq!(call(&sim, "GET", &ip_path(&pod, 1), None).0, 200);
    // DELETE /port drops it; always 200, also for a VMI it does not know.
    assert_eq!(
        call(&sim, "DELETE", &port_path(&pod, 1), None),
        (200, json!({}))
    );
    assert_eq!(call(&sim, "GET", &port_path(&pod, 1), None).0, 404);
    let unknown = format!("/port/{}", uuid());
    assert_eq!(call(&sim, "DELETE", &unknown, None), (200, json!({})));
    assert!(sim.get("/sim/ports").as_array().unwrap().is_empty());
    assert!(sim.violations().is_empty());
}

#[test]
fn one_vmi_through_both_routes_is_a_violation_and_each_delete_drops_its_half() {
    let pod = two_vmi_pod();
    let sim = both_routes(&pod, (0, "tapeeeeeeeeeeee"), (0, "vhost0f"));
    let violations = sim.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0]["request"], "POST /port");
    assert_eq!(violations[0]["registered-by"], "POST /vm");
    assert_eq!(violations[0]["vmi-uuid"], pod.vmis[0].uuid.as_str());
    let ports = sim.get("/sim/ports");
    let routes: Vec<&Value> = ports
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["sim-route"])
        .collect();
    assert_eq!(routes, [&json!("POST /vm"), &json!("POST /port")]);
    call(&sim, "DELETE", &format!("/vm/{}", pod.uuid), None);
    assert_eq!(
        call(&sim, "GET", &port_path(&pod, 0), None).0,
        200,
        "the /port half stays"
    );
    call(&sim, "DELETE", &port_path(&pod, 0), None);
    assert_eq!(call(&sim, "GET", &port_path(&pod, 0), None).0, 404);
}

#[test]
fn ports_dir_keeps_post_port_records_across_a_restart() {
    let pod = two_vmi_pod();
    let dir = TempDir::new();
    let args = ["--ports-dir", dir.0.to_str().unwrap()];
    let mut sim = Sim::start(&[&pod], &args);
    call(&sim, "POST", "/port", Some(&nova(&sim, &pod, 1, "vhost0g")));
    let file = dir.0.join(&pod.vmis[1].uuid);
    let record: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(record["system-name"], "vhost0g");
    assert_eq!(record["author"], "/usr/bin/contrail-vrouter-agent");
    sim.restart(&args);
    assert_eq!(call(&sim, "GET", &port_path(&pod, 1), None).0, 200);
    call(&sim, "DELETE", &port_path(&pod, 1), None);
    assert!(!file.exists());
}

fn vhost(sim: &Sim) -> Vec<Value> {
    sim.get("/sim/vhost").as_array().unwrap().clone()
}

#[test]
fn dpdk_stand_in_retries_until_the_apps_socket_appears_behind_a_symlink() {
    let pod = two_vmi_pod();
    let (vr, pod_dir) = (TempDir::new(), TempDir::new());
    let sim = Sim::dpdk(&[&pod], &vr.0);
    // The vRouter's fixed path is a symlink into the pod's directory, where nothing listens yet.
    let sock = pod_dir.0.join("sock");
    let link = vr.0.join("uvh_vif_vhost0h");
    symlink(&sock, &link).unwrap();
    call(&sim, "POST", "/port", Some(&nova(&sim, &pod, 1, "vhost0h")));
    // A POST /vm port on a DPDK node is an AF_PACKET port: no socket.
    call(
        &sim,
        "POST",
        "/vm",
        Some(&cni(&sim, &pod, 0, "tapffffffffffff")),
    );
    wait_for("the stand-in to retry", BOUND, || {
        vhost(&sim)[0]["attempts"].as_u64().unwrap() >= 3
    });
    let v = &vhost(&sim)[0];
    assert_eq!(vhost(&sim).len(), 1, "{v}");
    assert_eq!(v["connected"], false);
    assert_eq!(v["system-name"], "vhost0h");
    assert_eq!(v["path"], link.to_str().unwrap());
    assert_eq!(v["truncated"], false);
    let ports = sim.get("/sim/ports");
    let transport = |route: &str| {
        let p = ports
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["sim-route"] == route)
            .unwrap();
        p["sim-transport"].clone()
    };
    assert_eq!(transport("POST /port"), "pmd");
    assert_eq!(transport("POST /vm"), "af-packet");

    // The application comes up: the stand-in connects through the symlink.
    let listener = UnixListener::bind(&sock).unwrap();
    wait_for("the stand-in to connect", BOUND, || {
        vhost(&sim)[0]["connected"] == true
    });
    let (mut conn, _) = listener.accept().unwrap();
    assert_eq!(vhost(&sim)[0]["connects"], 1);

    // DELETE /port: the stand-in disconnects and is gone; the socket file stays.
    call(&sim, "DELETE", &port_path(&pod, 1), None);
    assert!(vhost(&sim).is_empty());
    conn.set_read_timeout(Some(BOUND)).unwrap();
    assert_eq!(
        conn.read(&mut [0u8; 16]).unwrap(),
        0,
        "the stand-in closed its end"
    );
    assert!(sock.exists() && link.exists(), "never unlinked");
    // A type 1 (namespace) port is no vhost-user port.
    let ns_port = with_key(nova(&sim, &pod, 1, "vhost0i"), "type", json!(1));
    assert_eq!(call(&sim, "POST", "/port", Some(&ns_port)).0, 200);
    assert!(vhost(&sim).is_empty());
}

#[test]
fn dpdk_stand_in_truncates_a_path_longer_than_107_bytes_like_vrouter_dpdk() {
    let pod = two_vmi_pod();
    let vr = TempDir::new();
    let long = vr.0.join("d".repeat(100));
    std::fs::create_dir(&long).unwrap();
    let sim = Sim::dpdk(&[&pod], &long);
    call(&sim, "POST", "/port", Some(&nova(&sim, &pod, 0, "vhost0j")));
    let v = &vhost(&sim)[0];
    assert_eq!(v["truncated"], true);
    assert_eq!(v["path"].as_str().unwrap().len(), 107);
}

#[test]
fn without_dpdk_there_is_no_stand_in() {
    let pod = two_vmi_pod();
    let sim = Sim::start(&[&pod], &[]);
    call(&sim, "POST", "/port", Some(&nova(&sim, &pod, 0, "vhost0k")));
    let (code, _) = call(&sim, "GET", "/sim/vhost", None);
    assert_eq!(code, 404);
}
