use super::message::*;
use super::*;
use netlink_packet_core::Emitable;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteScope};

/// A link message as the kernel would send it, encoded by the crate's own emitter.
fn encoded(attributes: Vec<LinkAttribute>, up: bool) -> Vec<u8> {
    let mut m = LinkMessage::default();
    m.header.index = 7;
    if up {
        m.header.flags = LinkFlags::Up | LinkFlags::Broadcast;
    }
    m.attributes = attributes;
    let mut bytes = vec![0; m.buffer_len()];
    m.emit(&mut bytes);
    bytes
}

#[test]
fn the_lean_link_parser_reads_what_the_crate_encodes() {
    let vlan = encoded(
        vec![
            LinkAttribute::Mtu(1450),
            LinkAttribute::IfName("vlan100".into()),
            LinkAttribute::Address(vec![2, 0, 0, 0, 0, 9]),
            LinkAttribute::Link(3),
            LinkAttribute::TxQueueLen(1000),
            LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Vlan),
                LinkInfo::Data(InfoData::Vlan(vec![InfoVlan::Id(100)])),
            ]),
        ],
        true,
    );
    let want = Link {
        index: 7,
        mac: Some([2, 0, 0, 0, 0, 9]),
        mtu: 1450,
        name: "vlan100".into(),
        up: true,
        kind: Some("vlan".into()),
        lower: Some(3),
        lower_elsewhere: false,
        vlan: Some(100),
    };
    assert_eq!(parse_link(&vlan).unwrap(), want);
    // lo: no kind, a 6-byte all-zero address, down; a macvlan's data is not a VLAN tag.
    let lo = encoded(vec![LinkAttribute::IfName("lo".into())], false);
    let lo = parse_link(&lo).unwrap();
    assert_eq!(
        (lo.name.as_str(), lo.up, lo.kind, lo.vlan),
        ("lo", false, None, None)
    );
    let macvlan = encoded(
        vec![LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::MacVlan),
            LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(
                MacVlanMode::Vepa,
            )])),
        ])],
        true,
    );
    let macvlan = parse_link(&macvlan).unwrap();
    assert_eq!(
        (macvlan.kind.as_deref(), macvlan.vlan),
        (Some("macvlan"), None)
    );
}

#[test]
fn the_lean_link_parser_refuses_what_overruns_its_message() {
    let mut bytes = encoded(vec![LinkAttribute::IfName("eth0".into())], true);
    assert!(parse_link(&bytes[..10]).is_err(), "a cut header");
    let last = bytes.len();
    bytes[16] = 200; // the name attribute's length, past the end
    assert!(
        parse_link(&bytes[..last]).is_err(),
        "an attribute past the end"
    );
}

#[test]
fn private_groups_are_high_and_within_what_ip_shows() {
    for _ in 0..100 {
        let g = private_group();
        assert!((0x4000_0000..=i32::MAX as u32).contains(&g), "{g:#x}");
    }
}

#[test]
fn route_messages_mask_host_bits_and_scope_on_link_routes() {
    let on_link = Route {
        dst: "fd00::1/128".parse().unwrap(),
        gateway: None,
        oif: Some(4),
    };
    let m = route_message(&on_link);
    assert_eq!(m.header.scope, RouteScope::Link);
    let op = Op::NewRoute {
        append: true,
        route: on_link,
    };
    assert_eq!(op.to_string(), "append route fd00::1/128 dev #4");
    let m = route_message(&Route {
        dst: "10.1.2.3/24".parse().unwrap(),
        gateway: Some("10.1.2.1".parse().unwrap()),
        oif: None,
    });
    assert!(
        m.attributes
            .contains(&RouteAttribute::Destination(RouteAddress::Inet(
                "10.1.2.0".parse().unwrap()
            )))
    );
    assert_eq!(m.header.scope, RouteScope::Universe);
}

#[test]
fn errors_keep_the_operation_its_object_and_the_errno() {
    let e = check_name(
        &|| Op::Rename {
            index: 3,
            name: "a/b".into(),
        },
        "a/b",
    )
    .unwrap_err();
    assert_eq!(
        e.op(),
        &Op::Rename {
            index: 3,
            name: "a/b".into()
        }
    );
    assert_eq!(
        e.detail(),
        Some(&Detail::InvalidName { name: "a/b".into() })
    );
    assert_eq!(e.errno(), Some(libc::EINVAL));
    assert!(
        e.to_string()
            .starts_with("rename link #3 to a/b: invalid interface name \"a/b\": "),
        "{e}"
    );
    let mtu = Error::new(
        Op::CreateVeth {
            host: "veth1".into(),
            peer: "eth0".into(),
        },
        io::Error::from_raw_os_error(libc::EINVAL),
    )
    .mtu_detail(9000, 1500);
    assert_eq!(
        mtu.detail(),
        Some(&Detail::Mtu {
            mtu: 9000,
            other: 1500
        })
    );
    assert!(
        mtu.to_string()
            .starts_with("create veth veth1/eth0: MTU 9000/1500 rejected: "),
        "{mtu}"
    );
}
