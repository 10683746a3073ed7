//! The pod's and the node's kernel: [`netlink`] (small named operations on a socket, the
//! namespace guard), [`links`] (the host-side kinds, veth or nested VLAN + macvlan, behind one
//! seam; a vhost-user attachment's directory and link are in [`vhost`]), [`interface`] (the wanted state of an interface, pure), [`names`] (the names the
//! plugin derives, pure) and [`conflict`] (why an interface cannot be made as asked).

pub mod conflict;
pub mod interface;
pub(crate) mod links;
pub mod names;
pub mod netlink;
pub mod vhost;
