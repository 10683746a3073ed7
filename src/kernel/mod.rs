//! The pod's and the node's kernel: [`netlink`] (small named operations on a socket, the
//! namespace guard), [`links`] (the host-side kinds, veth or nested VLAN + macvlan, behind one
//! seam), [`interface`] (the wanted state of an interface, pure) and [`names`] (the names the
//! plugin derives, pure).

pub mod interface;
pub(crate) mod links;
pub mod names;
pub mod netlink;
