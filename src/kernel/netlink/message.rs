//! The plugin's netlink messages: the requests it builds and the replies it reads (links with a
//! lean parser: the crate's decodes every attribute of every link).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use netlink_packet_core::{
    DecodeError, Emitable, NetlinkDeserializable, NetlinkHeader, NetlinkPayload,
    NetlinkSerializable, NlasIterator, Parseable,
};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
    RouteVia,
};

use super::{Link, Route, VethEnd};

/// Room for one datagram of a dump: the kernel fills them up to 32 KiB for a reader with a
/// buffer that large. Allocated, not zeroed: only what the kernel writes is touched.
pub(super) const RECV_BUF: usize = 32 * 1024;

/// The rtnetlink requests this module sends, with their message type (`RTM_*`). Only these are
/// encoded, and only [`Reply`] is decoded: the crate's codecs of every other rtnetlink family
/// (traffic control, neighbours, rules, ...) stay out of the binary, whose pages every call
/// touches.
#[derive(Debug)]
pub(super) enum Message {
    Link(u16, LinkMessage),
    Address(u16, AddressMessage),
    Route(u16, RouteMessage),
}

impl NetlinkSerializable for Message {
    fn message_type(&self) -> u16 {
        match self {
            Message::Link(t, _) | Message::Address(t, _) | Message::Route(t, _) => *t,
        }
    }

    fn buffer_len(&self) -> usize {
        match self {
            Message::Link(_, m) => m.buffer_len(),
            Message::Address(_, m) => m.buffer_len(),
            Message::Route(_, m) => m.buffer_len(),
        }
    }

    fn serialize(&self, buffer: &mut [u8]) {
        match self {
            Message::Link(_, m) => m.emit(buffer),
            Message::Address(_, m) => m.emit(buffer),
            Message::Route(_, m) => m.emit(buffer),
        }
    }
}

/// The replies to this module's requests: links, addresses and routes (a dump's).
#[derive(Debug)]
pub(super) enum Reply {
    Link(Link),
    Address(AddressMessage),
    Route(RouteMessage),
}

impl NetlinkDeserializable for Reply {
    type Error = DecodeError;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Reply, DecodeError> {
        Ok(match header.message_type {
            libc::RTM_NEWLINK => Reply::Link(parse_link(payload)?),
            libc::RTM_NEWADDR => Reply::Address(AddressMessage::parse(payload)?),
            libc::RTM_NEWROUTE => Reply::Route(RouteMessage::parse(payload)?),
            t => return Err(format!("unexpected rtnetlink message type {t}").into()),
        })
    }
}

/// A link message as [`Link`], reading only the attributes it keeps. The crate's parser decodes
/// every one of a link's ~50 attributes (statistics, per-family settings, ...), building an
/// error context string for each: most of the user-space time of a call that reads a link.
pub(super) fn parse_link(payload: &[u8]) -> Result<Link, DecodeError> {
    // struct ifinfomsg: family u8, pad u8, type u16, index i32, flags u32, change u32.
    let header = payload
        .get(..16)
        .ok_or_else(|| DecodeError::from("link message shorter than its header"))?;
    let word = |at: usize| u32_of(&header[at..at + 4]);
    let mut link = Link {
        index: word(4)?,
        mac: None,
        mtu: 0,
        name: String::new(),
        up: word(8)? & libc::IFF_UP as u32 != 0,
        kind: None,
        lower: None,
        lower_elsewhere: false,
        vlan: None,
    };
    for attribute in attributes(&payload[16..]) {
        let (kind, value) = attribute?;
        match kind {
            libc::IFLA_IFNAME => link.name = c_string(value)?,
            libc::IFLA_LINK => link.lower = Some(u32_of(value)?),
            libc::IFLA_LINK_NETNSID => link.lower_elsewhere = true,
            libc::IFLA_MTU => link.mtu = u32_of(value)?,
            // Non-Ethernet links (lo, tunnels) have other address lengths.
            libc::IFLA_ADDRESS => link.mac = value.try_into().ok(),
            libc::IFLA_LINKINFO => {
                // The kernel puts the kind before its kind-specific data.
                for info in attributes(value) {
                    let (info, value) = info?;
                    match info {
                        libc::IFLA_INFO_KIND => link.kind = Some(c_string(value)?),
                        libc::IFLA_INFO_DATA if link.kind.as_deref() == Some("vlan") => {
                            for data in attributes(value) {
                                let (data, value) = data?;
                                if data == IFLA_VLAN_ID {
                                    link.vlan = Some(u16_of(value)?);
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(link)
}

/// `IFLA_VLAN_ID` in a VLAN's `IFLA_INFO_DATA` (linux/if_link.h).
pub(super) const IFLA_VLAN_ID: u16 = 1;

/// The attributes (type, value) of an attribute stream, bounds-checked by the crate's iterator.
pub(super) fn attributes(bytes: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), DecodeError>> {
    NlasIterator::new(bytes).map(|nla| {
        let nla = nla?;
        let (kind, len) = (nla.kind(), usize::from(nla.length()));
        Ok((kind, &nla.into_inner()[4..len]))
    })
}

pub(super) fn u32_of(value: &[u8]) -> Result<u32, DecodeError> {
    value
        .try_into()
        .map(u32::from_ne_bytes)
        .map_err(|_| DecodeError::from("a 32-bit attribute of another size"))
}

pub(super) fn u16_of(value: &[u8]) -> Result<u16, DecodeError> {
    value
        .try_into()
        .map(u16::from_ne_bytes)
        .map_err(|_| DecodeError::from("a 16-bit attribute of another size"))
}

/// A NUL-terminated string attribute.
pub(super) fn c_string(value: &[u8]) -> Result<String, DecodeError> {
    let bytes = value.split(|&b| b == 0).next().unwrap_or_default();
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::from("a name that is not UTF-8"))
}

impl From<Message> for NetlinkPayload<Message> {
    fn from(m: Message) -> NetlinkPayload<Message> {
        NetlinkPayload::InnerMessage(m)
    }
}

/// The message for one veth end (or a macvlan: a name, a MAC, an MTU).
pub(super) fn veth_end(end: &VethEnd) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes
        .push(LinkAttribute::IfName(end.name.to_string()));
    if end.mtu != 0 {
        m.attributes.push(LinkAttribute::Mtu(end.mtu));
    }
    if let Some(mac) = end.mac {
        m.attributes.push(LinkAttribute::Address(mac.to_vec()));
    }
    m
}

/// The message for a route.
pub(super) fn route_message(route: &Route) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = if route.dst.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    m.header.destination_prefix_length = route.dst.prefix();
    m.header.table = RouteHeader::RT_TABLE_MAIN;
    m.header.protocol = RouteProtocol::Static;
    m.header.kind = RouteType::Unicast;
    m.header.scope = if route.gateway.is_some() {
        RouteScope::Universe
    } else {
        RouteScope::Link
    };
    // The kernel rejects host bits in a destination; CNI configs carry routes as networks
    // (Go's ParseCIDR masks them), so mask the same way.
    if route.dst.prefix() > 0 {
        m.attributes.push(RouteAttribute::Destination(route_address(
            route.dst.network(),
        )));
    }
    if let Some(gw) = route.gateway {
        m.attributes
            .push(RouteAttribute::Gateway(route_address(gw)));
    }
    if let Some(oif) = route.oif {
        m.attributes.push(RouteAttribute::Oif(oif));
    }
    m
}

pub(super) fn route_address(ip: IpAddr) -> RouteAddress {
    match ip {
        IpAddr::V4(ip) => RouteAddress::Inet(ip),
        IpAddr::V6(ip) => RouteAddress::Inet6(ip),
    }
}

pub(super) fn addr_from(
    message: &AddressMessage,
) -> Option<Result<IpNetwork, ipnetwork::IpNetworkError>> {
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS differs from it only on
    // point-to-point links (the peer) and is the only one for IPv6.
    let mut address = None;
    for attribute in &message.attributes {
        match attribute {
            AddressAttribute::Local(ip) => address = Some(*ip),
            AddressAttribute::Address(ip) if address.is_none() => address = Some(*ip),
            _ => {}
        }
    }
    address.map(|ip| IpNetwork::new(ip, message.header.prefix_len))
}

pub(super) fn route_from(message: &RouteMessage, v6: bool) -> Result<Route, String> {
    // The default route carries no RTA_DST.
    let mut dst = if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    let mut route = Route {
        dst: IpNetwork::from(dst),
        gateway: None,
        oif: None,
    };
    for attribute in &message.attributes {
        match attribute {
            RouteAttribute::Destination(address) => dst = route_ip(address)?,
            RouteAttribute::Gateway(address) => route.gateway = Some(route_ip(address)?),
            // An IPv4 route via an IPv6 gateway (RFC 5549).
            RouteAttribute::Via(RouteVia::Inet6(ip)) => route.gateway = Some(IpAddr::V6(*ip)),
            RouteAttribute::Oif(index) => route.oif = Some(*index),
            _ => {}
        }
    }
    route.dst =
        IpNetwork::new(dst, message.header.destination_prefix_length).map_err(|e| e.to_string())?;
    Ok(route)
}

pub(super) fn route_ip(address: &RouteAddress) -> Result<IpAddr, String> {
    match address {
        RouteAddress::Inet(ip) => Ok(IpAddr::V4(*ip)),
        RouteAddress::Inet6(ip) => Ok(IpAddr::V6(*ip)),
        other => Err(format!("unexpected route address {other:?}")),
    }
}
