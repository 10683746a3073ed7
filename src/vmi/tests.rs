use super::*;
use crate::ids::{ContainerId, IfName, VmUuid, VmiUuid, VnUuid};
#[cfg(feature = "thick")]
use crate::kernel::conflict::Conflict;
use crate::vmi::Malformed;
use serde_json::json;

fn ifname(s: &str) -> IfName {
    IfName::parse(s).unwrap()
}

const VM: &str = "40936d96-cf0e-11e8-9892-002590aaa964";

fn uuid(n: u8) -> String {
    format!("b86ac068-cf0e-11e8-b196-0025900000{n:02x}")
}

fn vmi(n: u8, network: &str, index: u32, count: u32) -> Vmi {
    Vmi {
        uuid: VmiUuid::parse(uuid(n)).unwrap(),
        vm_uuid: VmUuid::parse(VM).unwrap(),
        vn_uuid: VnUuid::parse("f95af4cc-e4ba-44c8-9936-269d891e0ee9").unwrap(),
        mac: Mac([2, 0, 0, 0, 0, n]),
        network: network.into(),
        index,
        count,
        interface: None,
        default_gw: false,
        ignored: None,
        namespace: Some("default".into()),
        name: Some("p".into()),
        vlan: None,
    }
}

fn claim(n: u8, container_id: &str, ifname: &str) -> Claim {
    Claim {
        vmi: VmiUuid::parse(uuid(n)).unwrap(),
        holder: Some((
            ContainerId::parse(container_id).unwrap(),
            IfName::parse(ifname).unwrap(),
        )),
    }
}

/// An attachment of sandbox `sandbox-2` (leaked: a test's few bytes).
fn at<'a>(network: &'a str, ifname: &str) -> Attachment<'a> {
    Attachment {
        network,
        container_id: Box::leak(Box::new(ContainerId::parse("sandbox-2").unwrap())),
        ifname: Box::leak(Box::new(IfName::parse(ifname).unwrap())),
    }
}

/// default(0), net-a(1), net-b(2), net-a(3); UUIDs deliberately not in index order.
fn pod() -> Vec<Vmi> {
    vec![
        vmi(9, "net-a", 3, 4),
        vmi(7, "net-b", 2, 4),
        vmi(8, "default", 0, 4),
        vmi(5, "net-a", 1, 4),
    ]
}

/// The VMI resolution picks when the agent has `reg` registered: the last byte of its uuid.
fn pick(
    vmis: &[Vmi],
    a: Attachment,
    claims: &[Claim],
    reg: &[String],
) -> std::result::Result<u8, Unresolved> {
    let choice = resolve(a, vmis, claims)?;
    let v = choice
        .take(|v| reg.iter().any(|r| *r == v.uuid.as_str()))
        .ok_or(Unresolved::AllTaken { count: 2 })?;
    Ok(u8::from_str_radix(&v.uuid.as_str()[34..], 16).unwrap())
}

#[test]
fn repeated_network_gets_lowest_free_index_in_order() {
    let vmis = pod();
    // First net-a attachment: index 1 (uuid 5), whatever the uuid order.
    assert_eq!(pick(&vmis, at("net-a", "net1"), &[], &[]), Ok(5));
    // Once claimed, the second gets index 3.
    let claims = [claim(5, "sandbox-2", "net1")];
    assert_eq!(pick(&vmis, at("net-a", "net3"), &claims, &[]), Ok(9));
}

#[test]
fn ifname_number_does_not_imply_index() {
    // [macvlan-net, net-a, net-a]: Multus calls us for net2 and net3; kube-manager numbered
    // only the Contrail networks: default 0, net-a 1, net-a 2.
    let vmis = vec![
        vmi(3, "net-a", 2, 3),
        vmi(1, "default", 0, 3),
        vmi(2, "net-a", 1, 3),
    ];
    assert_eq!(pick(&vmis, at("net-a", "net2"), &[], &[]), Ok(2));
    assert_eq!(
        pick(
            &vmis,
            at("net-a", "net3"),
            &[claim(2, "sandbox-2", "net2")],
            &[]
        ),
        Ok(3)
    );
}

#[test]
fn own_claim_wins_again_on_retry() {
    let vmis = pod();
    let claims = [claim(9, "sandbox-2", "net3"), claim(5, "sandbox-2", "net1")];
    assert_eq!(pick(&vmis, at("net-a", "net3"), &claims, &[]), Ok(9));
    assert_eq!(pick(&vmis, at("net-a", "net1"), &claims, &[]), Ok(5));
}

#[test]
fn interface_annotation_wins_over_everything() {
    let mut vmis = pod();
    vmis[0].interface = Some("eth5".into()); // index 3 asked for eth5
    assert_eq!(
        pick(
            &vmis,
            at("net-a", "eth5"),
            &[claim(5, "sandbox-2", "eth5")],
            &[]
        ),
        Ok(9)
    );
    // ...and is never handed to an interface with another name.
    let claims = [claim(5, "sandbox-2", "net1")];
    assert_eq!(
        pick(&vmis, at("net-a", "net2"), &claims, &[]),
        Err(Unresolved::AllTaken { count: 2 })
    );
}

#[test]
fn claims_of_an_older_sandbox_can_be_taken_over() {
    let vmis = pod();
    let claims = [claim(5, "sandbox-1", "net1"), claim(9, "sandbox-1", "net3")];
    let reg = [uuid(5), uuid(9)];
    assert_eq!(pick(&vmis, at("net-a", "net1"), &claims, &reg), Ok(5));
}

#[test]
fn registered_without_any_state_file_is_skipped() {
    let vmis = pod();
    assert_eq!(pick(&vmis, at("net-a", "net1"), &[], &[uuid(5)]), Ok(9));
    assert_eq!(
        pick(&vmis, at("net-a", "net1"), &[], &[uuid(5), uuid(9)]),
        Err(Unresolved::AllTaken { count: 2 })
    );
    // A network attached once has nothing to tell apart: no question for the agent.
    let choice = resolve(at("net-b", "net2"), &vmis, &[]).unwrap();
    assert_eq!(
        choice
            .take(|_| panic!("asked the agent"))
            .unwrap()
            .uuid
            .as_str(),
        uuid(7)
    );
}

#[test]
fn the_agent_is_asked_about_one_candidate_at_a_time_in_order() {
    let vmis: Vec<Vmi> = (0..8)
        .map(|k| vmi(k + 1, "net-a", u32::from(k) + 1, 9))
        .collect();
    let mut asked = Vec::new();
    let choice = resolve(at("net-a", "net1"), &vmis, &[]).unwrap();
    let v = choice.take(|v| {
        asked.push(v.index);
        v.index < 3
    });
    assert_eq!(v.unwrap().index, 3);
    assert_eq!(asked, [1, 2, 3], "only until one fits");
    // A claim of an older sandbox explains a registration: taken over without asking.
    let claims = [claim(1, "sandbox-1", "net1")];
    let choice = resolve(at("net-a", "net1"), &vmis, &claims).unwrap();
    assert_eq!(choice.take(|_| true).unwrap().index, 1);
}

#[test]
fn a_failed_attachment_keeps_its_vmi_from_its_siblings() {
    // net2's ADD failed and kept index 2 (a claim with no interface): net3 gets index 3,
    // and net2's retry gets index 2 again.
    let vmis = vec![
        vmi(1, "default", 0, 4),
        vmi(2, "net-a", 1, 4),
        vmi(3, "net-a", 2, 4),
        vmi(4, "net-a", 3, 4),
    ];
    let claims = [
        claim(1, "sandbox-2", "eth0"),
        claim(2, "sandbox-2", "net1"),
        claim(3, "sandbox-2", "net2"),
    ];
    assert_eq!(pick(&vmis, at("net-a", "net3"), &claims, &[]), Ok(4));
    assert_eq!(pick(&vmis, at("net-a", "net2"), &claims, &[]), Ok(3));
}

#[test]
fn all_taken_by_live_interfaces() {
    let vmis = pod();
    let claims = [claim(5, "sandbox-2", "net1"), claim(9, "sandbox-2", "net3")];
    assert_eq!(
        pick(&vmis, at("net-a", "net4"), &claims, &[]),
        Err(Unresolved::AllTaken { count: 2 })
    );
}

#[test]
fn unknown_network_lists_known_ones() {
    let err = pick(&pod(), at("net-z", "net1"), &[], &[]).unwrap_err();
    assert_eq!(
        err,
        Unresolved::NoSuchNetwork {
            known: vec!["default".into(), "net-a".into(), "net-b".into()]
        }
    );
}

#[test]
fn single_network_and_default() {
    let vmis = pod();
    assert_eq!(pick(&vmis, at("net-b", "net2"), &[], &[]), Ok(7));
    assert_eq!(pick(&vmis, at("default", "eth0"), &[], &[]), Ok(8));
}

#[test]
fn other_pods_claims_do_not_matter_for_other_vmis() {
    let vmis = pod();
    // A claim on an unrelated uuid changes nothing.
    let claims = [claim(0, "sandbox-2", "net1")];
    assert_eq!(pick(&vmis, at("net-a", "net1"), &claims, &[]), Ok(5));
}

#[test]
fn an_unreadable_claim_holds_its_vmi() {
    let vmis = pod();
    let claims = [Claim {
        vmi: VmiUuid::parse(uuid(5)).unwrap(),
        holder: None,
    }];
    assert_eq!(pick(&vmis, at("net-a", "net1"), &claims, &[uuid(5)]), Ok(9));
}

#[test]
fn completeness() {
    let vmis = pod();
    assert_eq!(complete(&vmis), Ok(true));
    assert_eq!(complete(&vmis[..3]), Ok(false));
    assert_eq!(complete(&[]), Ok(false));
    let mut other_vm = pod();
    other_vm[1].vm_uuid = VmUuid::parse(uuid(1)).unwrap();
    assert_eq!(complete(&other_vm), Ok(false));
    // Never one pod's: refused at once, naming the VMI and the problem.
    let mut dup = pod();
    dup[1].index = 3;
    let e = complete(&dup).unwrap_err().to_string();
    assert!(e.contains("repeats the index"), "{e}");
    let mut disagree = pod();
    disagree[2].count = 5;
    let e = complete(&disagree).unwrap_err().to_string();
    assert!(e.contains(&uuid(8)) && e.contains("another count"), "{e}");
    // Only part of the pod yet, but already two with one index: refused too.
    let e = complete(&dup[..2]).unwrap_err().to_string();
    assert!(e.contains("repeats the index"), "{e}");
}

#[test]
fn default_gw_takes_yes_and_no_and_ignores_the_rest() {
    let gw = |value: &str| {
        let body = json!([cfg_item(
            &uuid(1),
            json!([format!("{{default-gw:{value}}}")])
        )]);
        let v = parse_cfg(body.to_string().as_bytes()).unwrap().remove(0);
        (v.default_gw, v.ignored)
    };
    for yes in ["true", "True", "yes", "1"] {
        assert_eq!(gw(yes), (true, None), "{yes}");
    }
    for no in ["false", "FALSE", "no", "0"] {
        assert_eq!(gw(no), (false, None), "{no}");
    }
    for other in ["", "maybe", "nope", "2", "t\u{1b}[31m"] {
        assert_eq!(
            gw(other),
            (false, Some(("default-gw", other.to_string()))),
            "{other}"
        );
    }
}

#[test]
fn default_gw_annotation_else_cluster_network() {
    let mut vmis = pod();
    assert_eq!(default_gw(&vmis).unwrap().uuid.as_str(), uuid(8));
    vmis[1].default_gw = true;
    assert_eq!(default_gw(&vmis).unwrap().uuid.as_str(), uuid(7));
    let secondary_only = vec![vmi(1, "net-a", 1, 2)];
    assert_eq!(default_gw(&secondary_only), None);
}

fn cfg_item(id: &str, annotations: Value) -> Value {
    json!({"id": id, "vm-uuid": VM, "vn-id": "f95af4cc-e4ba-44c8-9936-269d891e0ee9",
           "vn-name": "default-domain:k8s-default:net-a", "mac-address": "02:b8:6a:c0:68:cf",
           "sub-interface": false, "vlan-id": 65535, "annotations": annotations})
}

#[test]
fn parses_the_agents_cfg_answer() {
    let body = json!([cfg_item(
        &uuid(1),
        json!([
            "{cluster:k8s}",
            "{network:net-a}",
            "{index:1/3}",
            "{interface:eth5}",
            "{default-gw:true}",
            "{note:a:b:c}",
            "garbage"
        ])
    )]);
    let v = &parse_cfg(body.to_string().as_bytes()).unwrap()[0];
    assert_eq!((v.network.as_str(), v.index, v.count), ("net-a", 1, 3));
    assert_eq!(v.interface.as_deref(), Some("eth5"));
    assert!(v.default_gw);
    assert_eq!(v.mac.to_string(), "02:b8:6a:c0:68:cf");
}

#[test]
fn a_lone_vmi_without_annotations_is_the_whole_pod() {
    let mut item = cfg_item(&uuid(1), json!([]));
    item.as_object_mut().unwrap().remove("annotations");
    let v = parse_cfg(json!([item]).to_string().as_bytes()).unwrap();
    assert_eq!(
        (v[0].network.as_str(), v[0].index, v[0].count),
        ("default", 0, 1)
    );
    assert_eq!(complete(&v), Ok(true));
}

#[test]
fn hostile_cfg_answers_are_decode_errors() {
    let bad = [
        json!({"not": "an array"}),
        json!([cfg_item("../../etc/passwd", json!(["{index:0/1}"]))]),
        json!([cfg_item(
            "B86AC068-CF0E-11E8-B196-002590AAA964",
            json!(["{index:0/1}"])
        )]),
        json!([cfg_item(&uuid(1), json!(["{index:2/2}"]))]),
        json!([cfg_item(&uuid(1), json!(["{index:x}"]))]),
        // A count that would size an allocation: refused, whatever memory there is.
        json!([cfg_item(&uuid(1), json!(["{index:0/4294967295}"]))]),
        json!([cfg_item(&uuid(1), json!(["{index:0/4097}"]))]),
        json!([cfg_item(
            &uuid(1),
            json!(["{index:0/1}", "{interface:../x}"])
        )]),
        json!([
            cfg_item(&uuid(1), json!(["{network:a}"])),
            cfg_item(&uuid(2), json!(["{network:a}"]))
        ]),
    ];
    let fields = [
        None,
        Some("id"),
        Some("id"),
        Some("index annotation"),
        Some("index annotation"),
        Some("index annotation"),
        Some("index annotation"),
        Some("interface annotation"),
        Some("index annotation"),
    ];
    for (b, want) in bad.into_iter().zip(fields) {
        let got = match parse_cfg(b.to_string().as_bytes()).unwrap_err() {
            Malformed::Field { field, .. } => Some(field),
            Malformed::Shape { .. } => None,
            other => panic!("{b}: {other}"),
        };
        assert_eq!(got, want, "{b}");
    }
    let mut bad_mac = cfg_item(&uuid(1), json!(["{index:0/1}"]));
    for mac in [
        "01:00:5e:00:00:01",
        "00:00:00:00:00:00",
        "zz:00:00:00:00:00",
        "02:00:00:00:00",
        "02:00:00:00:00:00:00",
    ] {
        bad_mac["mac-address"] = json!(mac);
        assert!(
            parse_cfg(json!([bad_mac]).to_string().as_bytes()).is_err(),
            "{mac}"
        );
    }
    assert!(parse_cfg(b"[{\"id\": ").is_err());
}

fn ip_item() -> Value {
    json!({"id": uuid(1), "instance-id": VM, "mac-address": "02:d8:da:c0:68:aa", "system-name": uuid(1),
           "ip-address": "30.1.1.252", "plen": 24, "dns-server": "30.1.1.253", "gateway": "30.1.1.254",
           "v6-ip-address": "fd00:30::fc", "v6-dns-server": "fd00:30::fd", "v6-gateway": "fd00:30::fe"})
}

#[test]
fn parses_dual_stack_ip_config() {
    let ip = parse_ip(json!([ip_item()]).to_string().as_bytes(), VM, &uuid(1)).unwrap();
    assert_eq!(ip.v4.unwrap().to_string(), "30.1.1.252/24");
    assert_eq!(ip.v6.unwrap().to_string(), "fd00:30::fc/128");
    assert_eq!(ip.v6_gateway.unwrap().to_string(), "fd00:30::fe");
    assert_eq!(ip.nameservers(), vec!["30.1.1.253", "fd00:30::fd"]);
    // A 36-character uuid is not a host interface: not registered yet.
    assert_eq!(ip.registered_as, None);
}

#[test]
fn v6_plen_is_used_when_present_and_unspecified_means_absent() {
    let mut item = ip_item();
    item["v6-plen"] = json!(64);
    item["ip-address"] = json!(" 0.0.0.0");
    item["system-name"] = json!("tap0123456789ab");
    let ip = parse_ip(json!([item]).to_string().as_bytes(), VM, &uuid(1)).unwrap();
    assert_eq!(ip.v6.unwrap().to_string(), "fd00:30::fc/64");
    assert_eq!(ip.v4, None);
    assert_eq!(ip.registered_as.as_deref(), Some("tap0123456789ab"));
}

#[test]
fn the_vlan_tag_is_read_when_it_is_one() {
    for (rx, want) in [
        (json!(10), Some(10)),
        (json!(4094), Some(4094)),
        (json!(65535), None),
        (json!(0), None),
        (json!("10"), None),
        (json!(-1), None),
    ] {
        let mut item = ip_item();
        item["rx-vlan-id"] = rx.clone();
        let ip = parse_ip(json!([item]).to_string().as_bytes(), VM, &uuid(1)).unwrap();
        assert_eq!(ip.vlan, want, "{rx}");
    }
}

#[test]
fn seed_style_strings_are_accepted() {
    let mut item = ip_item();
    item["ip-address"] = json!(" 10.47.255.250");
    item["plen"] = json!("12");
    item["v6-ip-address"] = json!("::");
    item["v6-plen"] = json!("");
    let ip = parse_ip(json!([item]).to_string().as_bytes(), VM, &uuid(1)).unwrap();
    assert_eq!(ip.v4.unwrap().to_string(), "10.47.255.250/12");
    assert_eq!(ip.v6, None);
}

#[test]
fn hostile_ip_answers_are_decode_errors() {
    let mutations: [(&str, Value); 8] = [
        ("plen", json!(33)),
        ("plen", json!(0)),
        ("plen", json!("x")),
        ("ip-address", json!("300.1.1.1")),
        ("ip-address", json!(7)),
        ("v6-plen", json!(129)),
        ("mac-address", json!("ff:ff:ff:ff:ff:ff")),
        ("gateway", json!("not-an-ip")),
    ];
    for (k, v) in mutations {
        let mut item = ip_item();
        item[k] = v.clone();
        match parse_ip(json!([item]).to_string().as_bytes(), VM, &uuid(1)).unwrap_err() {
            Malformed::Field { field, .. } => assert_eq!(field, k),
            // A number where the contract has a string.
            Malformed::Shape { at, .. } => assert_eq!(at, format!("[0].{k}")),
            other => panic!("{k}={v}: {other}"),
        }
    }
    let mut other_vm = ip_item();
    other_vm["instance-id"] = json!(uuid(3));
    assert!(matches!(
        parse_ip(json!([other_vm]).to_string().as_bytes(), VM, &uuid(1)),
        Err(Malformed::OtherInstance { .. })
    ));
    let mut none = ip_item();
    none["ip-address"] = json!("");
    none["v6-ip-address"] = json!("::");
    assert!(parse_ip(json!([none]).to_string().as_bytes(), VM, &uuid(1)).is_err());
    assert!(parse_ip(json!([ip_item()]).to_string().as_bytes(), VM, &uuid(2)).is_err());
    let mut no_plen = ip_item();
    no_plen.as_object_mut().unwrap().remove("plen");
    assert!(parse_ip(json!([no_plen]).to_string().as_bytes(), VM, &uuid(1)).is_err());
}

#[test]
fn uuids() {
    assert!(valid_uuid(VM));
    for bad in [
        "",
        "40936d96-cf0e-11e8-9892-002590aaa96",
        "40936D96-cf0e-11e8-9892-002590aaa964",
        "40936d96-cf0e-11e8-9892/002590aaa964",
        "../../../../../../../../../../etc/x",
    ] {
        assert!(!valid_uuid(bad), "{bad}");
    }
}

#[test]
fn plugin_mode_wants_one_vmi_with_the_default_route_rule() {
    let vmis = pod();
    let w = for_attachment(&vmis, &vmis[2], &ifname("eth0"));
    assert_eq!(
        (w.vmi.uuid.as_str(), w.ifname.as_str(), w.default_gw),
        (uuid(8).as_str(), "eth0", true)
    );
    let w = for_attachment(&vmis, &vmis[3], &ifname("net1"));
    assert!(!w.default_gw);
    let why = resolve(at("net-z", "net9"), &vmis, &[]).unwrap_err();
    assert_eq!(
        why,
        Unresolved::NoSuchNetwork {
            known: vec!["default".into(), "net-a".into(), "net-b".into()]
        }
    );
}

#[cfg(feature = "thick")]
#[test]
fn thick_mode_names_follow_index_and_annotations() {
    let mut vmis = pod();
    vmis[0].interface = Some("data0".into()); // net-a, index 3
    let names: Vec<String> = for_pod(&vmis, &ifname("eth0"))
        .unwrap()
        .into_iter()
        .map(|w| w.ifname.to_string())
        .collect();
    assert_eq!(names, ["eth0", "eth1", "eth2", "data0"]);
    assert_eq!(
        for_pod(&vmis, &ifname("ceth0")).unwrap()[0].ifname.as_str(),
        "ceth0"
    );
    // The default route: annotated, else the cluster network's.
    let gw: Vec<bool> = for_pod(&vmis, &ifname("eth0"))
        .unwrap()
        .iter()
        .map(|w| w.default_gw)
        .collect();
    assert_eq!(gw, [true, false, false, false]);
    vmis[1].default_gw = true; // net-b, index 2
    let gw: Vec<bool> = for_pod(&vmis, &ifname("eth0"))
        .unwrap()
        .iter()
        .map(|w| w.default_gw)
        .collect();
    assert_eq!(gw, [false, false, true, false]);
}

#[cfg(feature = "thick")]
#[test]
fn thick_mode_name_clashes_fail_before_anything_happens() {
    let mut vmis = pod();
    vmis[1].interface = Some("eth1".into()); // index 2 asks for eth1, index 1's name
    let err = for_pod(&vmis, &ifname("eth0")).unwrap_err();
    assert!(
        matches!(&err, Conflict::SameName { name, .. } if name == "eth1"),
        "{err}"
    );
    // CNI_IFNAME itself may clash with an annotation.
    let mut vmis = pod();
    vmis[3].interface = Some("eth0".into());
    assert!(for_pod(&vmis, &ifname("eth0")).is_err());
}
