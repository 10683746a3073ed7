use super::*;
use serde_json::json;

fn record(default_gw: bool) -> Record {
    serde_json::from_value(
        json!({"vm-id": "c", "vm-uuid": "40936d96-cf0e-11e8-9892-002590aaa964", "vm-name": "k8s__ns__p",
        "host-ifname": "tap000000000001", "vm-ifname": "net1", "vm-namespace": "/run/netns/x",
        "vn-uuid": "f95af4cc-e4ba-44c8-9936-269d891e0ee9", "vmi-uuid": "b86ac068-cf0e-11e8-b196-002590000001", "mac-address": "02:00:00:00:00:01",
        "default-gw": if default_gw { "true" } else { "false" }}),
    )
    .unwrap()
}

fn ip(v4: Option<&str>, v4gw: Option<&str>, v6: Option<&str>, v6gw: Option<&str>) -> IpConfig {
    IpConfig {
        v4: v4.map(|s| s.parse().unwrap()),
        v4_gateway: v4gw.map(|s| s.parse().unwrap()),
        v4_dns: None,
        v6: v6.map(|s| s.parse().unwrap()),
        v6_gateway: v6gw.map(|s| s.parse().unwrap()),
        v6_dns: None,
        mac: Mac([2, 0, 0, 0, 0, 9]),
        registered_as: None,
        vlan: None,
    }
}

fn net(s: &str) -> IpNetwork {
    s.parse().unwrap()
}

fn dual() -> IpConfig {
    ip(
        Some("10.1.0.3/24"),
        Some("10.1.0.1"),
        Some("fd00::3/128"),
        Some("fd00::1"),
    )
}

#[test]
fn a_secondary_network_gets_no_default_route() {
    let s = describe(
        &record(false),
        &ip(Some("10.1.0.3/24"), Some("10.1.0.1"), None, None),
        1500,
    )
    .unwrap();
    assert!(s.on_link.is_empty() && s.defaults.is_empty());
    assert_eq!(s.mac, Mac([2, 0, 0, 0, 0, 1]), "the record's MAC");
}

#[test]
fn the_default_gw_interface_gets_both_families() {
    let s = describe(&record(true), &dual(), 1500).unwrap();
    // A /128 never contains its gateway: reached on-link.
    assert_eq!(s.on_link, [net("fd00::1/128")]);
    assert_eq!(
        s.defaults,
        [
            (net("0.0.0.0/0"), "10.1.0.1".parse().unwrap()),
            (net("::/0"), "fd00::1".parse().unwrap())
        ]
    );
}

#[test]
fn an_ipv4_host_route_and_an_ipv6_prefix() {
    let s = describe(
        &record(false),
        &ip(
            Some("10.1.0.3/32"),
            Some("10.1.0.1"),
            Some("fd00::3/64"),
            Some("fd00::1"),
        ),
        1500,
    )
    .unwrap();
    assert_eq!(s.on_link, [net("10.1.0.1/32")]);
}

#[test]
fn ipv6_needs_1280() {
    let v6 = ip(None, None, Some("fd00::3/64"), None);
    let e = describe(&record(false), &v6, 1279).unwrap_err();
    assert_eq!(e.code(), crate::error::code::INVALID_CONFIG);
    assert!(describe(&record(false), &v6, 1280).is_ok());
    assert!(
        describe(
            &record(false),
            &ip(Some("10.1.0.3/24"), None, None, None),
            576
        )
        .is_ok()
    );
}

fn route(dst: &str, gw: Option<&str>, oif: u32) -> Route {
    Route {
        dst: net(dst),
        gateway: gw.map(|g| g.parse().unwrap()),
        oif: Some(oif),
    }
}

/// The kernel as ADD leaves it, on link 7 and host link 3.
fn as_added(s: &Spec) -> Seen {
    let mut routes = vec![route("fd00::1/128", None, 7)];
    routes.extend(s.defaults.iter().map(|(d, g)| Route {
        dst: *d,
        gateway: Some(*g),
        oif: Some(7),
    }));
    Seen {
        link: Some(LinkSeen {
            index: 7,
            mac: Some(s.mac),
            mtu: s.mtu,
            up: true,
            vlan: None,
            veth: true,
            lower: Some(3),
            lower_elsewhere: true,
        }),
        addresses: s.addresses.iter().map(|(a, _)| *a).collect(),
        routes,
        host: Some(LinkSeen {
            index: 3,
            mac: Some(Mac([6, 0, 0, 0, 0, 3])),
            mtu: s.mtu,
            up: true,
            vlan: s.vlan,
            veth: true,
            lower: Some(7),
            lower_elsewhere: true,
        }),
    }
}

#[test]
fn verify_finds_each_difference() {
    let s = describe(&record(true), &dual(), 1400).unwrap();
    let good = as_added(&s);
    assert_eq!(s.verify(&good), Ok(()));
    type Break = Box<dyn Fn(&mut Seen)>;
    let cases: Vec<(Break, &str)> = vec![
        (Box::new(|k| k.link = None), "missing from /run/netns/x"),
        (
            Box::new(|k| k.link.as_mut().unwrap().mac = Some(Mac([2, 0, 0, 0, 0, 2]))),
            "MAC 02:00:00:00:00:02",
        ),
        (
            Box::new(|k| k.link.as_mut().unwrap().mac = None),
            "net1 has no MAC, the agent says",
        ),
        (
            Box::new(|k| k.link.as_mut().unwrap().mtu = 1500),
            "MTU 1500",
        ),
        (
            Box::new(|k| k.host.as_mut().unwrap().mtu = 1500),
            "tap000000000001 has MTU 1500",
        ),
        (Box::new(|k| k.link.as_mut().unwrap().up = false), "is down"),
        (
            Box::new(|k| k.host.as_mut().unwrap().up = false),
            "tap000000000001 is down",
        ),
        (
            Box::new(|k| {
                k.addresses.remove(1);
            }),
            "lacks address fd00::3/128",
        ),
        (
            Box::new(|k| {
                k.routes.remove(0);
            }),
            "route to fd00::1/128 on net1",
        ),
        (
            Box::new(|k| {
                k.routes.remove(1);
            }),
            "route to 0.0.0.0/0 via 10.1.0.1",
        ),
        (
            Box::new(|k| k.host = None),
            "tap000000000001 is missing from the host",
        ),
        // A look-alike the pod made: a veth of its own, its peer in the pod.
        (
            Box::new(|k| {
                let l = k.link.as_mut().unwrap();
                (l.index, l.lower, l.lower_elsewhere) = (9, Some(10), false);
            }),
            "net1 in the pod is not the one attached to host interface tap000000000001",
        ),
        // One that even took the index the host end's peer had, in the pod's namespace.
        (
            Box::new(|k| {
                k.link.as_mut().unwrap().lower_elsewhere = false;
            }),
            "is not the one attached",
        ),
        // The host end leads elsewhere (the real one was moved out, a new one took its
        // name and sits on the host end's index).
        (
            Box::new(|k| k.host.as_mut().unwrap().lower = Some(8)),
            "is not the one attached",
        ),
    ];
    for (break_it, words) in cases {
        let mut seen = good.clone();
        break_it(&mut seen);
        let m = s.verify(&seen).unwrap_err();
        assert!(m.to_string().contains(words), "{words}: {m}");
    }
    // Another interface holding the pod's default route is fine (calico's eth0).
    let mut seen = good.clone();
    seen.routes
        .retain(|r| r.dst.prefix() != 0 || r.dst.is_ipv6());
    seen.routes.push(route("0.0.0.0/0", Some("10.9.0.1"), 2));
    assert_eq!(s.verify(&seen), Ok(()));
    assert_eq!(s.defaults_to_add(&seen.routes, 7), [s.defaults[1]]);
}

#[test]
fn the_tag_is_the_agents_current_one_for_nested_attachments_only() {
    for (recorded, agent, want) in [
        (Some(10), Some(11), Some(11)),
        (Some(10), None, Some(10)),
        (None, Some(11), None),
    ] {
        let mut r = record(true);
        r.vlan = recorded;
        let ip = IpConfig {
            vlan: agent,
            ..dual()
        };
        assert_eq!(describe(&r, &ip, 1400).unwrap().vlan, want);
    }
}

#[test]
fn verify_finds_a_vlan_link_without_the_vmis_tag() {
    let mut s = describe(&record(true), &dual(), 1400).unwrap();
    s.vlan = Some(10);
    let good = as_added(&s);
    assert_eq!(s.verify(&good), Ok(()));
    for (has, words) in [
        (Some(11), "has tag 11, the agent says 10"),
        (None, "is not a VLAN link (the agent's tag is 10)"),
    ] {
        let mut seen = good.clone();
        seen.host.as_mut().unwrap().vlan = has;
        let m = s.verify(&seen).unwrap_err();
        assert!(m.to_string().contains(words), "{words}: {m}");
    }
}

#[test]
fn prev_result_entries_must_be_there_as_listed() {
    let s = describe(&record(false), &dual(), 1400).unwrap();
    let seen = as_added(&s);
    let result = s
        .outcome(seen.host.as_ref().unwrap().mac, &[])
        .to_json(cni::Version::V110);
    let prev = |v: Value| v.as_object().unwrap().clone();
    assert_eq!(verify_listed(&prev(result.clone()), &s, &seen), Ok(()));
    let broken: [(&str, Value); 5] = [
        ("/interfaces/1/mac", json!("02:00:00:00:00:99")),
        ("/interfaces/1/mtu", json!(9000)),
        ("/interfaces/0/mac", json!("06:00:00:00:00:99")),
        ("/ips/0/address", json!("10.1.0.99/24")),
        ("/ips/1/interface", json!(7)),
    ];
    for (at, value) in broken {
        let mut r = result.clone();
        *r.pointer_mut(at).unwrap() = value.clone();
        let m = verify_listed(&prev(r), &s, &seen).unwrap_err();
        assert!(matches!(m, Mismatch::Listed { .. }), "{at}={value}: {m}");
    }
    let mut gone = seen.clone();
    gone.link = None;
    assert!(verify_listed(&prev(result.clone()), &s, &gone).is_err());
    // Another plugin's interface in the chain is not ours to check.
    let mut chained = result.clone();
    chained["interfaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "eth9", "sandbox": "/run/netns/x"}));
    assert_eq!(verify_listed(&prev(chained), &s, &seen), Ok(()));
}

#[test]
fn a_vhost_user_result_has_one_interface_with_its_sandbox_and_socket_path() {
    let r = record(true);
    let ip = ip(Some("10.0.0.5"), Some("10.0.0.1"), None, None);
    let spec = describe(&r, &ip, 1500).unwrap();
    let out = spec.vhost_outcome("/var/run/vhost/net1.sock");
    let j = out.to_json(crate::cni::Version::V110);
    let ifs = j["interfaces"].as_array().unwrap();
    assert_eq!(ifs.len(), 1, "{j}");
    assert_eq!(ifs[0]["name"], "net1");
    assert_eq!(ifs[0]["sandbox"], "/run/netns/x");
    assert_eq!(ifs[0]["mac"], "02:00:00:00:00:01");
    assert_eq!(ifs[0]["socketPath"], "/var/run/vhost/net1.sock");
    assert_eq!(j["ips"][0]["interface"], 0);
    assert_eq!(j["ips"][0]["address"], "10.0.0.5/32");
    // socketPath is CNI 1.1's: an older result has no such key.
    let j = out.to_json(crate::cni::Version::V100);
    assert!(j["interfaces"][0].get("socketPath").is_none(), "{j}");
}
