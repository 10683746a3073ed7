//! Why an interface cannot be made as asked: a leaf type, which the VMI resolution and the
//! link code both return.

use std::fmt;

use crate::ids::{IfName, VmName, VmiUuid};

/// Why an interface cannot be made as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// The name is taken in the pod: another attachment owns it.
    NameTaken { name: IfName, netns: String },
    /// Gone right after it was made (something else deletes links).
    Vanished { name: IfName },
    /// A host link of this name is another pod's attachment.
    HeldByPod { name: String, pod: VmName },
    /// A host link in the way (by its name, or a VLAN link by its tag on the parent) is not one
    /// this plugin makes.
    NotOurs { name: String },
    /// Thick mode: two VMIs would get one name.
    SameName {
        name: String,
        first: (String, u32),
        second: (String, u32),
    },
    /// Thick mode: an `interface` annotation names an interface Linux refuses.
    BadName { name: String, why: &'static str },
    /// A newer sandbox of the pod took the VMI over while this ADD ran.
    TakenOver { ifname: IfName },
    /// A state record without the MAC this plugin writes into every one.
    NoMac { vmi: VmiUuid },
    /// Nested mode: a state record without the VMI's VLAN tag.
    NoTag { vmi: VmiUuid },
    /// vhost-user: a state record without the pod's UID, which names the pod's directory.
    NoPodUid { vmi: VmiUuid },
    /// Nested mode: the parent interface is not on the node.
    ParentMissing { name: String },
    /// Nested mode: the parent interface is down.
    ParentDown { name: String },
    /// vhost-user: something that is not what this plugin makes (what it `is`) at a path it
    /// writes in the pod's directory, or in place of that directory.
    InTheWay { path: String, is: &'static str },
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::NameTaken { name, netns } => write!(
                f,
                "interface {name} already exists in {netns}; another attachment owns that name"
            ),
            Conflict::Vanished { name } => {
                write!(f, "interface {name} vanished right after creation")
            }
            Conflict::HeldByPod { name, pod } => {
                write!(
                    f,
                    "host interface {name} is an attachment of pod {pod}: not replacing it"
                )
            }
            Conflict::NotOurs { name } => write!(
                f,
                "host interface {name} is in the way (the name, or the VLAN tag on the parent) \
                 and is not one this plugin makes: not replacing it"
            ),
            Conflict::SameName {
                name,
                first,
                second,
            } => write!(
                f,
                "VMIs {} (index {}) and {} (index {}) would both be {name}: fix the pod's \
                 interface names",
                first.0, first.1, second.0, second.1
            ),
            Conflict::BadName { name, why } => write!(f, "interface name {name:?} {why}"),
            Conflict::TakenOver { ifname } => write!(
                f,
                "{ifname} was taken over by a newer sandbox of the pod while it was being added"
            ),
            Conflict::NoMac { vmi } => write!(f, "the state record of VMI {vmi} has no MAC"),
            Conflict::NoTag { vmi } => {
                write!(
                    f,
                    "the state record of VMI {vmi} has no VLAN tag (nested mode)"
                )
            }
            Conflict::NoPodUid { vmi } => write!(
                f,
                "the state record of VMI {vmi} has no pod-uid, which names its vhost-user \
                 directory"
            ),
            Conflict::ParentMissing { name } => write!(
                f,
                "parent interface {name} of nested mode is not on this node: set \
                 parent-interface in the node-wide file"
            ),
            Conflict::ParentDown { name } => write!(
                f,
                "parent interface {name} of nested mode is down: the pods' VLANs would carry \
                 nothing"
            ),
            Conflict::InTheWay { path, is } => write!(
                f,
                "{path} is {is}, where this plugin writes its own: not replacing it. Whoever \
                 put it there (the pod, its directory being the pod's) must remove it"
            ),
        }
    }
}
