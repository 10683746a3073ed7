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
    let (op, m) = route_message(
        "append",
        &Route {
            dst: "fd00::1/128".parse().unwrap(),
            gateway: None,
            oif: Some(4),
        },
    );
    assert_eq!(op, "append route fd00::1/128 dev #4");
    assert_eq!(m.header.scope, RouteScope::Link);
    let (_, m) = route_message(
        "add",
        &Route {
            dst: "10.1.2.3/24".parse().unwrap(),
            gateway: Some("10.1.2.1".parse().unwrap()),
            oif: None,
        },
    );
    assert!(
        m.attributes
            .contains(&RouteAttribute::Destination(RouteAddress::Inet(
                "10.1.2.0".parse().unwrap()
            )))
    );
    assert_eq!(m.header.scope, RouteScope::Universe);
}
