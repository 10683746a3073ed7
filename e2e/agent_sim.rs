//! The agent simulator's own contract, as the vRouter agent's port-IPC sources define it
//! (`port_ipc/rest_server.cc`, `port_ipc_handler.cc`, `port_subscribe_table.cc`): every other
//! test trusts the simulator, so what it promises is executable here. Raw HTTP on purpose: the
//! status line, the error bodies and the kept-alive connection are part of the contract.

use std::time::{Duration, Instant};

use contrail_testkit::*;
use serde_json::{Value, json};

/// One request on a fresh connection: (status code, body as JSON).
fn call(sim: &Sim, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let (status, body) = exchange(&mut sim.connect(), method, path, body);
    let code = status.split(' ').nth(1).unwrap().parse().unwrap();
    (code, serde_json::from_str(&body).unwrap())
}

fn ip_path(pod: &PodSpec, k: usize) -> String {
    format!("/vm/{}/{}", pod.uuid, pod.vmis[k].uuid)
}

/// A registration body for VMI `k`, under a host interface that does not exist.
fn port(sim: &Sim, pod: &PodSpec, k: usize, host: &str) -> Value {
    let (_, cfg) = call(sim, "GET", &format!("/vm-cfg/{}", pod.vm_name()), None);
    let vn = cfg
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == pod.vmis[k].uuid.as_str())
        .unwrap()["vn-id"]
        .clone();
    json!({"vm-uuid": pod.uuid, "vm-name": pod.vm_name(), "vm-id": "c1", "host-ifname": host,
           "vm-ifname": format!("net{k}"), "vn-uuid": vn, "vmi-uuid": pod.vmis[k].uuid})
}

fn two_vmi_pod() -> PodSpec {
    PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)])
}

#[test]
fn config_is_there_before_any_registration() {
    let pod = two_vmi_pod();
    let sim = Sim::start(&[&pod], &[]);
    let (code, cfg) = call(&sim, "GET", &format!("/vm-cfg/{}", pod.vm_name()), None);
    assert_eq!(code, 200);
    let cfg = cfg.as_array().unwrap();
    // Ordered by VMI uuid, not by index; each with its MAC and its annotations.
    let mut uuids: Vec<&str> = pod.vmis.iter().map(|v| v.uuid.as_str()).collect();
    uuids.sort();
    let got: Vec<&str> = cfg.iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(got, uuids);
    let net_a = cfg.iter().find(|v| v["id"] == pod.vmis[1].uuid.as_str());
    let net_a = net_a.unwrap();
    assert_eq!(net_a["mac-address"], pod.vmis[1].mac);
    let annotations = net_a["annotations"].as_array().unwrap();
    assert!(annotations.contains(&json!("{network:net-a}")), "{net_a}");
    assert!(annotations.contains(&json!("{index:1/2}")), "{net_a}");
}

#[test]
fn ip_config_exists_only_after_registration_and_the_interface_need_not_exist() {
    let pod = two_vmi_pod();
    let sim = Sim::start(&[&pod], &[]);
    assert_eq!(call(&sim, "GET", &ip_path(&pod, 1), None).0, 404);
    // The REST handler registers without looking for the host interface.
    let host = "tapnotthere0001";
    assert!(!host_link_exists(host));
    let (code, body) = call(&sim, "POST", "/vm", Some(&port(&sim, &pod, 1, host)));
    assert_eq!((code, body), (200, json!({})));
    let (code, ip) = call(&sim, "GET", &ip_path(&pod, 1), None);
    assert_eq!(code, 200);
    assert_eq!(ip[0]["system-name"], host);
    assert_eq!(
        format!(
            "{}/{}",
            ip[0]["ip-address"].as_str().unwrap(),
            ip[0]["plen"]
        ),
        pod.vmis[1].addr()
    );
    // The other VMI of the pod is still unregistered.
    assert_eq!(call(&sim, "GET", &ip_path(&pod, 0), None).0, 404);
}

#[test]
fn the_whole_pod_answers_once_every_vmi_is_registered() {
    let pod = two_vmi_pod();
    let sim = Sim::start(&[&pod], &[]);
    let whole = format!("/vm/{}", pod.uuid);
    call(
        &sim,
        "POST",
        "/vm",
        Some(&port(&sim, &pod, 0, "tapaaaaaaaaaaaa")),
    );
    assert_eq!(call(&sim, "GET", &whole, None).0, 404);
    call(
        &sim,
        "POST",
        "/vm",
        Some(&port(&sim, &pod, 1, "tapbbbbbbbbbbbb")),
    );
    let (code, all) = call(&sim, "GET", &whole, None);
    assert_eq!(code, 200);
    assert_eq!(all.as_array().unwrap().len(), 2);
}

#[test]
fn ip_delay_counts_from_the_registration() {
    let delay = Duration::from_millis(400);
    let pod = PodSpec::new(vec![
        VmiSpec::new("default", 1).with("ip-delay-ms", json!(delay.as_millis() as u64)),
    ]);
    let sim = Sim::start(&[&pod], &[]);
    // The pod has been known for longer than the delay before it is registered...
    let body = port(&sim, &pod, 0, "tapcccccccccccc");
    std::thread::sleep(delay);
    assert_eq!(call(&sim, "GET", &ip_path(&pod, 0), None).0, 404);
    let registered = Instant::now();
    call(&sim, "POST", "/vm", Some(&body));
    // ...and still the IP configuration comes `delay` after the registration, not before.
    wait_for("the IP configuration", Duration::from_secs(10), || {
        call(&sim, "GET", &ip_path(&pod, 0), None).0 == 200
    });
    assert!(registered.elapsed() >= delay, "{:?}", registered.elapsed());
    // For the benchmark: when it was registered and when a GET first answered with the IP
    // configuration (a later one does not move it), on CLOCK_MONOTONIC.
    let stamps = || {
        let ports = call(&sim, "GET", "/sim/ports", None).1;
        let p = &ports[0];
        let ns = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("no {k} in {p}"));
        (ns("sim-registered-ns"), ns("sim-ip-answered-ns"))
    };
    let (since, answered) = stamps();
    assert!(
        answered - since >= delay.as_nanos() as u64,
        "{since} {answered}"
    );
    assert_eq!(call(&sim, "GET", &ip_path(&pod, 0), None).0, 200);
    assert_eq!(stamps(), (since, answered));
}

#[test]
fn registering_again_updates_the_registration_without_starting_over() {
    let pod = PodSpec::new(vec![
        VmiSpec::new("default", 1).with("ip-delay-ms", json!(300)),
    ]);
    let sim = Sim::start(&[&pod], &[]);
    call(
        &sim,
        "POST",
        "/vm",
        Some(&port(&sim, &pod, 0, "tapdddddddddddd")),
    );
    wait_for("the IP configuration", Duration::from_secs(10), || {
        call(&sim, "GET", &ip_path(&pod, 0), None).0 == 200
    });
    // A retried ADD registers the VMI again, under a new host name: answered at once.
    call(
        &sim,
        "POST",
        "/vm",
        Some(&port(&sim, &pod, 0, "tapeeeeeeeeeeee")),
    );
    let (code, ip) = call(&sim, "GET", &ip_path(&pod, 0), None);
    assert_eq!(code, 200);
    assert_eq!(ip[0]["system-name"], "tapeeeeeeeeeeee");
    assert_eq!(sim.ports().len(), 1);
}

#[test]
fn delete_drops_every_registration_of_the_pod() {
    let pod = two_vmi_pod();
    let other = PodSpec::new(vec![VmiSpec::new("default", 3)]);
    let sim = Sim::start(&[&pod, &other], &[]);
    call(
        &sim,
        "POST",
        "/vm",
        Some(&port(&sim, &pod, 0, "tapfffffffffff0")),
    );
    call(
        &sim,
        "POST",
        "/vm",
        Some(&port(&sim, &pod, 1, "tapfffffffffff1")),
    );
    call(
        &sim,
        "POST",
        "/vm",
        Some(&port(&sim, &other, 0, "tapfffffffffff2")),
    );
    let (code, body) = call(&sim, "DELETE", &format!("/vm/{}", pod.uuid), None);
    assert_eq!((code, body), (200, json!({})));
    for k in 0..2 {
        assert_eq!(call(&sim, "GET", &ip_path(&pod, k), None).0, 404);
    }
    // Only that pod's: the other pod stays registered.
    assert_eq!(call(&sim, "GET", &ip_path(&other, 0), None).0, 200);
    assert_eq!(sim.ports().len(), 1);
    // Always 200, also for a pod the agent does not know.
    let unknown = format!("/vm/{}", uuid());
    assert_eq!(call(&sim, "DELETE", &unknown, None), (200, json!({})));
}

#[test]
fn errors_carry_the_agents_status_line_and_bodies() {
    let pod = two_vmi_pod();
    let sim = Sim::start(&[&pod], &[]);
    let mut conn = sim.connect();
    let (status, body) = exchange(&mut conn, "GET", &ip_path(&pod, 0), None);
    // The agent says "OK" whatever the code, and wraps its message in a JSON object.
    assert_eq!(status, "HTTP/1.1 404 OK");
    assert_eq!(body, r#"{"error":"{ Not Found }"}"#);
    let (status, body) = exchange(&mut conn, "GET", "/vm-cfg/k8s__default__nobody", None);
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("HTTP/1.1 404 OK", r#"{"error":"{ Not Found }"}"#)
    );
    // An upper-case uuid matches no route.
    let upper = ip_path(&pod, 0).to_uppercase().replace("/VM/", "/vm/");
    let (status, body) = exchange(&mut conn, "GET", &upper, None);
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("HTTP/1.1 404 OK", r#"{"error":"Unknown Request"}"#)
    );
    // A registration without a required field is refused with 500.
    let mut bad = port(&sim, &pod, 0, "tap000000000009");
    bad.as_object_mut().unwrap().remove("vn-uuid");
    let (status, body) = exchange(&mut conn, "POST", "/vm", Some(&bad));
    assert_eq!(status, "HTTP/1.1 500 OK");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("vn-uuid"),
        "{body}"
    );
    assert!(sim.ports().is_empty());
}

#[test]
fn connections_stay_open_between_requests() {
    let pod = two_vmi_pod();
    let sim = Sim::start(&[&pod], &[]);
    let mut conn = sim.connect();
    let cfg = format!("/vm-cfg/{}", pod.vm_name());
    for _ in 0..3 {
        assert_eq!(exchange(&mut conn, "GET", &cfg, None).0, "HTTP/1.1 200 OK");
    }
    let body = port(&sim, &pod, 0, "tap00000000000a");
    assert_eq!(
        exchange(&mut conn, "POST", "/vm", Some(&body)).0,
        "HTTP/1.1 200 OK"
    );
    assert_eq!(
        exchange(&mut conn, "GET", &ip_path(&pod, 0), None).0,
        "HTTP/1.1 200 OK"
    );
}

#[test]
fn stats_count_every_request_served_but_the_simulators_own_in_all_and_by_kind() {
    let pod = two_vmi_pod();
    let sim = Sim::start(&[&pod], &[]);
    let requests = || call(&sim, "GET", "/sim/stats", None).1;
    assert_eq!(requests(), json!({"requests": 0}));
    let body = port(&sim, &pod, 0, "tap00000000000b"); // one GET /vm-cfg
    // Requests, not connections: four on one kept-alive connection, answered 200 or 404 alike.
    let mut conn = sim.connect();
    exchange(&mut conn, "POST", "/vm", Some(&body));
    exchange(&mut conn, "GET", &ip_path(&pod, 0), None);
    exchange(&mut conn, "GET", &ip_path(&pod, 1), None);
    exchange(&mut conn, "GET", "/nowhere", None);
    // The simulator's own requests are not the agent's: not counted.
    assert_eq!(sim.ports().len(), 1);
    assert_eq!(requests(), json!({"requests": 5}));
    assert_eq!(requests(), json!({"requests": 5}));
    // The same by method, route and answer.
    assert_eq!(
        call(&sim, "GET", "/sim/requests", None).1,
        json!({
            "GET /vm-cfg/<vm-name> 200": 1,
            "POST /vm 200": 1,
            "GET /vm/<vm-uuid>/<vmi-uuid> 200": 1,
            "GET /vm/<vm-uuid>/<vmi-uuid> 404": 1,
            "GET <other> 404": 1,
        })
    );
}

// ---------------------------------------------------------------- nested pods

/// A pod of a nested node (a VM of the hypervisor's vRouter): a VLAN sub-interface of the
/// node's VMI per attachment.
fn nested_pod() -> PodSpec {
    PodSpec::new(vec![
        VmiSpec::new("default", 1).with("vlan-id", json!(100)),
        VmiSpec::new("net-a", 2).with("vlan-id", json!(101)),
    ])
}

#[test]
fn a_nested_pods_vmis_carry_their_tag_and_an_ip_configuration_without_registration() {
    // `port_ipc_handler.cc` (vlan-id from the config entry's tag), `vm_interface_config.cc`
    // (a VMI with a parent VMI is `VM_VLAN_ON_VMI`, made from config alone).
    let pod = nested_pod();
    let plain = two_vmi_pod();
    let sim = Sim::start(&[&pod, &plain], &[]);
    let (_, cfg) = call(&sim, "GET", &format!("/vm-cfg/{}", pod.vm_name()), None);
    let tag_of = |k: usize| {
        let v = cfg
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == pod.vmis[k].uuid.as_str())
            .unwrap();
        // The agent computes `sub-interface` before it updates the parent: it lags.
        assert_eq!(v["sub-interface"], false);
        v["vlan-id"].clone()
    };
    assert_eq!((tag_of(0), tag_of(1)), (json!(100), json!(101)));
    let (_, plain_cfg) = call(&sim, "GET", &format!("/vm-cfg/{}", plain.vm_name()), None);
    assert_eq!(plain_cfg[0]["vlan-id"], 65535, "no VLAN");
    let (code, ip) = call(&sim, "GET", &ip_path(&pod, 1), None);
    assert_eq!(code, 200, "{ip}");
    let ip = &ip[0];
    assert_eq!(ip["ip-address"], "10.2.0.12");
    assert_eq!(
        (ip["rx-vlan-id"].clone(), ip["tx-vlan-id"].clone()),
        (json!(101), json!(101))
    );
    // No host interface was registered: the agent names the port after the VMI.
    assert_eq!(
        ip["system-name"],
        format!("{}__{}", pod.name, pod.vmis[1].uuid)
    );
    assert_eq!(sim.violations(), [] as [Value; 0]);
}

#[test]
fn a_registration_of_a_nested_vmi_breaks_it_and_is_recorded() {
    // `vm_interface_config.cc` `ComputeTypeInfo`: "Have got InstancePortAdd message. Treat it
    // as VM_ON_TAP": the agent then looks for a tap of that name on the hypervisor.
    let pod = nested_pod();
    let sim = Sim::start(&[&pod], &[]);
    assert_eq!(call(&sim, "GET", &ip_path(&pod, 0), None).0, 200);
    let (code, _) = call(
        &sim,
        "POST",
        "/vm",
        Some(&port(&sim, &pod, 0, "tapnotthere0002")),
    );
    assert_eq!(code, 200, "the agent takes it");
    assert_eq!(call(&sim, "GET", &ip_path(&pod, 0), None).0, 404);
    assert_eq!(
        call(&sim, "GET", &ip_path(&pod, 1), None).0,
        200,
        "the other VMI is fine"
    );
    assert_eq!(
        sim.violations(),
        [json!({"request": "POST /vm", "vmi-uuid": pod.vmis[0].uuid})]
    );
    call(&sim, "DELETE", &format!("/vm/{}", pod.uuid), None);
    assert_eq!(
        sim.violations()[1],
        json!({"request": format!("DELETE /vm/{}", pod.uuid)})
    );
}

// ---------------------------------------------------------------- the agent under load

/// The agent's DB per second, and each VMI's config work (`GET /sim/load`).
fn load(sim: &Sim) -> Value {
    call(sim, "GET", "/sim/load", None).1
}

#[test]
fn with_exclusion_requests_hold_the_db_one_after_the_other() {
    // Each REST request runs as a task the agent's DB tasks exclude: five requests at once
    // take five turns, and are answered at the end of their own.
    let pod = two_vmi_pod();
    let turn_ns = 20_000_000;
    let sim = Sim::start(
        &[&pod],
        &["--exclusion", "--request-db-us", "20000", "--log-requests"],
    );
    let path = format!("/vm-cfg/{}", pod.vm_name());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..5 {
            s.spawn(|| assert_eq!(call(&sim, "GET", &path, None).0, 200));
        }
    });
    // Five turns of 20 ms in a row: the last answer cannot come before 100 ms.
    assert!(started.elapsed() >= Duration::from_millis(100));
    let load = load(&sim);
    assert_eq!(load["request-us"], 20000);
    // Whichever seconds the five arrived in: all of their DB time is theirs.
    let seconds = load["seconds"].as_array().unwrap();
    let sum = |f: &dyn Fn(&Value) -> f64| seconds.iter().map(f).sum::<f64>();
    assert_eq!(
        sum(&|s| s["db-requests-ms"].as_f64().unwrap()),
        100.0,
        "{load}"
    );
    let kind = "GET /vm-cfg/<vm-name> 200";
    assert_eq!(
        sum(&|s| s["requests"][kind].as_f64().unwrap_or(0.0)),
        5.0,
        "{load}"
    );
    // Each waited for the turns of those that arrived before it: the reported queue is the
    // schedule replayed from their arrivals, first come, first served (however far apart a
    // busy machine made them arrive).
    let log = call(&sim, "GET", "/sim/log", None).1;
    let mut arrivals: Vec<u64> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["arrived-ns"].as_u64().unwrap())
        .collect();
    arrivals.sort();
    let (mut busy, mut peak) = (0, 0);
    for a in arrivals {
        let start = a.max(busy);
        busy = start + turn_ns;
        peak = peak.max(start - a);
    }
    let reported = seconds
        .iter()
        .map(|s| s["queue-peak-ms"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(reported, peak as f64 / 1e6, "{load}");
}

#[test]
fn more_polling_delays_the_ip_configuration() {
    // A VMI's IP configuration needs DB work after its controller delay; requests queued ahead
    // of that work delay it. The same pod alone, then with clients polling without a pause.
    // The test waits through `/sim/ports`, which takes no turn in the DB: its own wait cannot
    // delay what it waits for.
    let (delay_ms, work_ms) = (100, 2);
    let ms = 1_000_000;
    let ready_after = |pollers: usize| -> (u64, Value) {
        let pod = PodSpec::new(vec![
            VmiSpec::new("default", 1).with("ip-delay-ms", json!(delay_ms)),
        ]);
        // A poll holds the DB for 10 ms: sixteen pollers keep 160 ms of turns booked ahead,
        // more than any pause a busy machine puts between a poller's answer and its next
        // request, so the DB is theirs when the work falls due.
        let args = [
            "--exclusion",
            "--request-db-us",
            "10000",
            "--vmi-db-us",
            "2000",
        ];
        let sim = Sim::start(&[&pod], &args);
        call(
            &sim,
            "POST",
            "/vm",
            Some(&port(&sim, &pod, 0, "tapdddddddddddd")),
        );
        let done = std::sync::atomic::AtomicBool::new(false);
        let mut ready = Value::Null;
        std::thread::scope(|s| {
            for _ in 0..pollers {
                s.spawn(|| {
                    let mut conn = sim.connect();
                    while !done.load(std::sync::atomic::Ordering::SeqCst) {
                        exchange(&mut conn, "GET", &ip_path(&pod, 0), None);
                    }
                });
            }
            wait_for("the IP configuration", Duration::from_secs(30), || {
                ready = call(&sim, "GET", "/sim/ports", None).1[0].clone();
                ready.get("sim-ip-ready-ns").is_some()
            });
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let ns = |k: &str| ready[k].as_u64().unwrap();
        (
            ns("sim-ip-ready-ns") - ns("sim-registered-ns"),
            load(&sim)["work"][0].clone(),
        )
    };
    let queued_ns = |work: &Value| (work["queued-ms"].as_f64().unwrap() * 1e6).round() as u64;
    // Alone: the controller's delay, then its own DB work, queued behind nothing (the
    // registration's turn ended long before).
    let (alone, work) = ready_after(0);
    assert_eq!(alone, (delay_ms + work_ms) * ms, "{work}");
    assert_eq!(
        (work["queued-ms"].clone(), work["by-requests-ms"].clone()),
        (json!(0.0), json!(0.0))
    );
    // Busy: the work queued behind the polls that came first, and all of that is theirs.
    let (busy, work) = ready_after(16);
    assert!(queued_ns(&work) > 0, "{work}");
    assert_eq!(work["by-requests-ms"], work["queued-ms"], "{work}");
    assert_eq!(busy, (delay_ms + work_ms) * ms + queued_ns(&work), "{work}");
}
