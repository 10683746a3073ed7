//! The agent's two answers: `vmi::parse_cfg` (`GET /vm-cfg`) and `vmi::parse_ip`
//! (`GET /vm/<vm>/<vmi>`) over generated, hostile and arbitrary bodies, and `Mac::parse`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value, json};

use contrail_k8s_cni::cni::check_ifname;
use contrail_k8s_cni::kernel::names;
use contrail_k8s_cni::vmi::{self, IpConfig, Mac, Vmi, valid_uuid};

use crate::config;
use crate::strategies::{
    VM_UUID, any_field, hostile_name, hostile_uuid, ifname_value, json_key, json_value, name,
    tricky_string, uuid,
};

fn mac_string() -> BoxedStrategy<String> {
    let fmt = |m: [u8; 6]| Mac(m).to_string();
    prop_oneof![
        6 => any::<[u8; 6]>().prop_map(move |mut m| { m[0] &= 0xfe; fmt(m) }),
        1 => any::<[u8; 6]>().prop_map(move |m| fmt(m).to_uppercase()),
        1 => any::<[u8; 6]>().prop_map(fmt),
        1 => select(&[
            "00:00:00:00:00:00",
            "ff:ff:ff:ff:ff:ff",
            "01:00:5e:00:00:01",
            "02:00:00:00:00",
            "02:00:00:00:00:01:",
            "02:00:00:00:00:01:02",
            "02-00-00-00-00-01",
            "2:0:0:0:0:1",
            "+2:00:00:00:00:01",
            "02:+0:00:00:00:01",
            "02:00:00:00:00:0g",
            "é2:00:00:00:00",
            "020000000001",
            "",
        ][..]).prop_map(String::from),
        1 => tricky_string(),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(config(512))]

    /// A MAC is accepted only in `aa:bb:cc:dd:ee:ff` form, unicast and non-zero, and prints back
    /// as it was written (up to case).
    #[test]
    fn mac_parse_accepts_only_the_colon_hex_form(s in mac_string()) {
        if let Some(m) = Mac::parse(&s) {
            prop_assert!(m.0[0] & 1 == 0 && m.0 != [0; 6], "{:?}", s);
            prop_assert_eq!(m.to_string(), s.to_ascii_lowercase());
        }
    }

    #[test]
    fn mac_parse_round_trips_unicast_macs(m in any::<[u8; 6]>()) {
        let s = Mac(m).to_string();
        let unicast = m[0] & 1 == 0 && m != [0; 6];
        prop_assert_eq!(Mac::parse(&s), unicast.then_some(Mac(m)));
        prop_assert_eq!(Mac::parse(&s.to_uppercase()), unicast.then_some(Mac(m)));
    }
}

fn uuid_value() -> BoxedStrategy<Value> {
    prop_oneof![
        8 => uuid().prop_map(Value::String),
        1 => hostile_uuid().prop_map(Value::String),
        1 => any_field(),
    ]
    .boxed()
}

fn index_annotation() -> BoxedStrategy<String> {
    let part = || {
        prop_oneof![
            any::<u32>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            select(&["", "x", "+1", "-0", " 1", "4294967296", "1.0"][..]).prop_map(String::from),
        ]
    };
    prop_oneof![
        6 => (1u32..8).prop_flat_map(|n| (0..n, Just(n))).prop_map(|(k, n)| format!("{k}/{n}")),
        1 => (part(), part()).prop_map(|(k, n)| format!("{k}/{n}")),
        1 => tricky_string(),
    ]
    .boxed()
}

fn annotation() -> BoxedStrategy<Value> {
    let s = prop_oneof![
        3 => name().prop_map(|n| format!("{{network:{n}}}")),
        1 => hostile_name().prop_map(|n| format!("{{network:{n}}}")),
        3 => index_annotation().prop_map(|i| format!("{{index:{i}}}")),
        3 => ifname_value().prop_map(|i| format!("{{interface:{i}}}")),
        1 => select(&["true", "false", "", "False", "no"][..]).prop_map(|b| format!("{{default-gw:{b}}}")),
        1 => Just("{cluster:k8s}".to_string()),
        1 => ("[a-z:{}-]{0,10}", tricky_string()).prop_map(|(k, v)| format!("{{{k}:{v}}}")),
        1 => tricky_string(),
    ];
    prop_oneof![9 => s.prop_map(Value::String), 1 => any_field()].boxed()
}

/// One VMI of a `GET /vm-cfg` answer: the agent's fields, each mostly valid, sometimes hostile
/// or missing, plus random extra fields.
fn cfg_item() -> BoxedStrategy<Value> {
    let field = |s: BoxedStrategy<Value>| option::weighted(0.95, s);
    (
        field(uuid_value()),
        field(uuid_value()),
        field(uuid_value()),
        field(prop_oneof![4 => name().prop_map(|n| json!(format!("default-domain:k8s-default:{n}"))), 1 => any_field()].boxed()),
        field(prop_oneof![9 => mac_string().prop_map(Value::String), 1 => any_field()].boxed()),
        option::weighted(
            0.9,
            prop_oneof![9 => vec(annotation(), 0..7).prop_map(Value::Array), 1 => any_field()],
        ),
        vec((json_key(), any_field()), 0..2),
    )
        .prop_map(|(id, vm, vn, vn_name, mac, ann, junk)| {
            let mut m: Map<String, Value> = junk.into_iter().collect();
            let fields = [
                ("id", id),
                ("vm-uuid", vm),
                ("vn-id", vn),
                ("vn-name", vn_name),
                ("mac-address", mac),
                ("annotations", ann),
            ];
            for (k, v) in fields {
                match v {
                    Some(v) => m.insert(k.into(), v),
                    None => m.remove(k),
                };
            }
            m.insert("sub-interface".into(), json!(false));
            m.insert("vlan-id".into(), json!(65535));
            Value::Object(m)
        })
        .boxed()
}

fn cfg_body() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        6 => vec(cfg_item(), 0..5).prop_map(|a| Value::Array(a).to_string().into_bytes()),
        1 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => vec(any::<u8>(), 0..128),
    ]
    .boxed()
}

fn check_vmis(r: &vmi::Parsed<Vec<Vmi>>) -> Result<(), TestCaseError> {
    let vmis = match r {
        // A refusal is by type (code 6 once the agent client wraps it); its message names
        // fields and kinds, so the answer's control characters never reach a log.
        Err(e) => {
            prop_assert!(!e.to_string().chars().any(char::is_control), "{}", e);
            return Ok(());
        }
        Ok(v) => v,
    };
    for v in vmis {
        prop_assert!(valid_uuid(v.uuid.as_str()), "id {:?}", v.uuid);
        prop_assert!(valid_uuid(v.vm_uuid.as_str()), "vm-uuid {:?}", v.vm_uuid);
        prop_assert!(valid_uuid(v.vn_uuid.as_str()), "vn-id {:?}", v.vn_uuid);
        prop_assert!(v.mac.0[0] & 1 == 0 && v.mac.0 != [0; 6], "mac {}", v.mac);
        prop_assert!(v.index < v.count, "index {}/{}", v.index, v.count);
        if let Some(i) = &v.interface {
            prop_assert!(check_ifname(i).is_ok(), "interface {:?}", i);
        }
        let host = names::host_ifname(v.uuid.as_str());
        prop_assert!(check_ifname(&host).is_ok());
    }
    // The consumers of a parsed answer must not panic on it either.
    if vmi::complete(vmis) == Ok(true) {
        let mut idx: Vec<u32> = vmis.iter().map(|v| v.index).collect();
        idx.sort_unstable();
        prop_assert!(idx.iter().copied().eq(0..vmis.len() as u32));
    }
    if let Some(gw) = vmi::default_gw(vmis) {
        prop_assert!(vmis.contains(gw));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn vmi_cfg_never_panics_and_accepts_only_sane_vmis(body in cfg_body()) {
        check_vmis(&vmi::parse_cfg(&body))?;
    }
}

fn addr_value<T: std::fmt::Display + std::fmt::Debug + Arbitrary + 'static>(
    unspecified: &'static str,
) -> BoxedStrategy<Value> {
    prop_oneof![
        6 => any::<T>().prop_map(|a| json!(a.to_string())),
        1 => any::<T>().prop_map(|a| json!(format!(" {a} "))),
        1 => select(vec!["", " ", "0.0.0.0", " 0.0.0.0", "::", "::ffff:10.1.1.1", unspecified])
            .prop_map(|s| json!(s)),
        1 => select(&["300.1.1.1", "1.2.3", "10.1.1.1/24", "fe80::1%eth0", "localhost", "0"][..])
            .prop_map(|s| json!(s)),
        1 => any_field(),
    ]
    .boxed()
}

fn plen_value(max: u64) -> BoxedStrategy<Value> {
    prop_oneof![
        6 => (0..=max + 8).prop_map(|n| json!(n)),
        2 => (0..=max + 8).prop_map(|n| json!(n.to_string())),
        1 => select(&["", " 24 ", "+24", "-1", "1.5", "x", "18446744073709551616"][..]).prop_map(|s| json!(s)),
        1 => any_field(),
    ]
    .boxed()
}

/// One entry of a `GET /vm/<vm>/<vmi>` answer, for `id`.
fn ip_item(id: Value) -> BoxedStrategy<Value> {
    let f = |s: BoxedStrategy<Value>| option::weighted(0.85, s);
    (
        option::weighted(0.97, prop_oneof![9 => mac_string().prop_map(Value::String), 1 => any_field()]),
        f(addr_value::<Ipv4Addr>("0.0.0.0")),
        f(plen_value(32)),
        f(addr_value::<Ipv6Addr>("::")),
        f(plen_value(128)),
        f(addr_value::<Ipv4Addr>("0.0.0.0")),
        f(addr_value::<Ipv4Addr>("0.0.0.0")),
        f(addr_value::<Ipv6Addr>("::")),
        f(addr_value::<Ipv6Addr>("::")),
        f(prop_oneof![2 => "tap[0-9a-f]{12}".prop_map(Value::String), 1 => ifname_value().prop_map(Value::String), 1 => any_field()].boxed()),
        vec((json_key(), any_field()), 0..2),
    )
        .prop_map(move |(mac, v4, plen, v6, v6plen, gw, dns, v6gw, v6dns, sys, junk)| {
            let mut m: Map<String, Value> = junk.into_iter().collect();
            let fields = [
                ("mac-address", mac),
                ("ip-address", v4),
                ("plen", plen),
                ("v6-ip-address", v6),
                ("v6-plen", v6plen),
                ("gateway", gw),
                ("dns-server", dns),
                ("v6-gateway", v6gw),
                ("v6-dns-server", v6dns),
                ("system-name", sys),
            ];
            for (k, v) in fields {
                match v {
                    Some(v) => m.insert(k.into(), v),
                    None => m.remove(k),
                };
            }
            m.insert("id".into(), id.clone());
            Value::Object(m)
        })
        .boxed()
}

fn ip_body() -> BoxedStrategy<(String, Vec<u8>)> {
    uuid()
        .prop_flat_map(|want| {
            // Mostly the VMI asked for among others; sometimes not there at all.
            let items = (
                option::weighted(0.9, ip_item(json!(want.clone()))),
                vec(uuid_value().prop_flat_map(ip_item), 0..3),
                any::<prop::sample::Index>(),
            )
                .prop_map(|(ours, mut others, at)| {
                    if let Some(ours) = ours {
                        others.insert(at.index(others.len() + 1), ours);
                    }
                    others
                });
            let body = prop_oneof![
                8 => items.prop_map(|a| Value::Array(a).to_string().into_bytes()),
                1 => json_value().prop_map(|v| v.to_string().into_bytes()),
                1 => vec(any::<u8>(), 0..128),
            ];
            (Just(want), body)
        })
        .boxed()
}

fn check_ip(r: &vmi::Parsed<IpConfig>) -> Result<(), TestCaseError> {
    let ip = match r {
        // A refusal is by type (code 6 once the agent client wraps it); its message names
        // fields and kinds, so the answer's control characters never reach a log.
        Err(e) => {
            prop_assert!(!e.to_string().chars().any(char::is_control), "{}", e);
            return Ok(());
        }
        Ok(ip) => ip,
    };
    prop_assert!(ip.v4.is_some() || ip.v6.is_some());
    if let Some(n) = ip.v4 {
        prop_assert!((1..=32).contains(&n.prefix()), "{n}");
        prop_assert!(!n.ip().is_unspecified(), "{n}");
    }
    if let Some(n) = ip.v6 {
        prop_assert!((1..=128).contains(&n.prefix()), "{n}");
        prop_assert!(!n.ip().is_unspecified(), "{n}");
    }
    for a in [ip.v4_gateway, ip.v4_dns].into_iter().flatten() {
        prop_assert!(!a.is_unspecified());
    }
    for a in [ip.v6_gateway, ip.v6_dns].into_iter().flatten() {
        prop_assert!(!a.is_unspecified());
    }
    prop_assert!(ip.mac.0[0] & 1 == 0 && ip.mac.0 != [0; 6], "mac {}", ip.mac);
    if let Some(r) = &ip.registered_as {
        prop_assert!(check_ifname(r).is_ok(), "{r:?}");
    }
    prop_assert_eq!(
        ip.addresses().len(),
        usize::from(ip.v4.is_some()) + usize::from(ip.v6.is_some())
    );
    for s in ip.nameservers() {
        prop_assert!(s.parse::<IpAddr>().is_ok());
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn vmi_ip_never_panics_and_accepts_only_sane_configs((want, body) in ip_body()) {
        check_ip(&vmi::parse_ip(&body, VM_UUID, &want))?;
    }

    #[test]
    fn vmi_parsers_never_panic_on_bytes(body in vec(any::<u8>(), 0..512), want in uuid()) {
        check_vmis(&vmi::parse_cfg(&body))?;
        check_ip(&vmi::parse_ip(&body, VM_UUID, &want))?;
    }
}
