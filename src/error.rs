//! One error type for the whole program. Each variant keeps what went wrong as data (the key,
//! the field, the interface, the cause: an I/O error, a netlink errno, the agent's status, a
//! wait that ran out); the CNI code is chosen in one place ([`Error::code`]) and the message an
//! operator reads is the `Display`. Retrying decides on the kind ([`Error::is_transient`]), never
//! on a code or a message.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::cni::SUPPORTED_VERSIONS;
pub use crate::kernel::interface::Mismatch;
use crate::kernel::netlink;
use crate::vmi::Unresolved;

/// Reserved CNI error codes, and this plugin's own (100 and up).
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const INVALID_ENV: u32 = 4;
    pub const IO: u32 = 5;
    pub const DECODE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin cannot serve ADD (the agent is unreachable).
    pub const NOT_AVAILABLE: u32 = 50;
    /// A panic caught before it reached the caller.
    pub const INTERNAL: u32 = 100;
    /// The agent knows the pod but none of its VMIs fits this attachment.
    pub const NO_VMI: u32 = 101;
    /// Creating or configuring the interface failed.
    pub const INTERFACE: u32 = 102;
    /// CHECK found the attachment different from what ADD made. The CNI specification defines
    /// no code for this; 100 and up are the plugin's.
    pub const CHECK_FAILED: u32 = 103;
}

/// What went wrong with one request to the agent.
#[derive(Debug)]
pub enum AgentFault {
    /// No answer: refused, reset, timed out, cut short. Asking again may help.
    Transport(String),
    /// An HTTP status other than 200 and 404. Asking again may help.
    Status(u16),
    /// An answer the contract does not allow. Asking again will not help.
    Refused(Malformed),
}

/// What is wrong with an answer of the agent: where, and of what kind. Never the answer's
/// bytes, which are not this plugin's to repeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    /// Not JSON at all (serde's syntax error: a position, no content).
    Json { what: String, why: String },
    /// JSON of another shape than the contract's, at `at`.
    Shape {
        what: String,
        at: String,
        missing: Option<String>,
    },
    /// A field with a value the contract does not allow.
    Field {
        what: String,
        field: &'static str,
        problem: &'static str,
    },
    /// The answer lacks what was asked for.
    Absent { what: String },
    /// More VMIs than any pod has.
    TooMany { count: usize, max: u32 },
    /// A VMI reported ready without an address.
    NoAddress { what: String },
    /// A VMI of the answer is not annotated as the calling pod's.
    NotThePods { vmi: String, pod: String },
    /// A VMI of the answer belongs to another VM than the others.
    OtherVm { vmi: String },
    /// An IP configuration of another VM than the pod's.
    OtherInstance { vmi: String, vm: String },
    /// An answer that breaks HTTP/1.1 (its framing, its head): what is wrong, never its bytes.
    Http { why: String },
    /// An answer larger than an answer may be.
    TooLarge { max: usize },
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::Json { what, why } => write!(f, "agent sent invalid JSON for {what}: {why}"),
            Malformed::Shape { what, at, missing } => match missing {
                Some(field) => write!(
                    f,
                    "agent sent {what} in another shape (at {at}: missing field {field})"
                ),
                None => write!(
                    f,
                    "agent sent {what} in another shape (at {at}: a value of another type)"
                ),
            },
            Malformed::Field {
                what,
                field,
                problem,
            } => write!(f, "agent sent {what} whose {field} {problem}"),
            Malformed::Absent { what } => write!(f, "agent's answer does not contain {what}"),
            Malformed::TooMany { count, max } => {
                write!(f, "agent sent {count} VMIs for one pod, more than {max}")
            }
            Malformed::NoAddress { what } => write!(
                f,
                "agent reports {what} ready but with neither an IPv4 nor an IPv6 address"
            ),
            Malformed::NotThePods { vmi, pod } => write!(
                f,
                "VMI {vmi} is not annotated as pod {pod}'s (its namespace and name annotations \
                 are missing or name another pod)"
            ),
            Malformed::OtherVm { vmi } => {
                write!(
                    f,
                    "VMI {vmi} belongs to another VM than the pod's other VMIs"
                )
            }
            Malformed::OtherInstance { vmi, vm } => write!(
                f,
                "agent sent the IP config of VMI {vmi} for another VM (its instance-id is not \
                 pod {vm})"
            ),
            Malformed::Http { why } => {
                write!(f, "agent sent an answer that breaks HTTP/1.1: {why}")
            }
            Malformed::TooLarge { max } => {
                write!(
                    f,
                    "agent sent an answer larger than the {max} bytes an answer may have"
                )
            }
        }
    }
}

/// Why an interface cannot be made as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// The name is taken in the pod: another attachment owns it.
    NameTaken { name: String, netns: String },
    /// Gone right after it was made (something else deletes links).
    Vanished { name: String },
    /// A host link of this name is another pod's attachment.
    HeldByPod { name: String, pod: String },
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
    TakenOver { ifname: String },
    /// A state record without the MAC this plugin writes into every one.
    NoMac { vmi: String },
    /// Nested mode: a state record without the VMI's VLAN tag.
    NoTag { vmi: String },
    /// Nested mode: the parent interface is not on the node.
    ParentMissing { name: String },
    /// Nested mode: the parent interface is down.
    ParentDown { name: String },
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
        }
    }
}

/// What a call was doing when more failures came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum During {
    /// Rolling back a failed ADD.
    Rollback,
    /// GC or the sweep, going on to the node's other pods.
    NodeWide,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cniVersion {0:?} is not supported; supported: {list}", list = SUPPORTED_VERSIONS.join(", "))]
    Version(String),
    /// A CNI_* variable (or a value in CNI_ARGS) the plugin cannot work with.
    #[error("{var}: {why}")]
    Env { var: String, why: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// Stdin that is not JSON.
    #[error("network config on stdin is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("invalid network config: {key}: {why}")]
    Config { key: String, why: String },
    /// The network's config sets keys that are the node's to other values than the node's.
    #[error("{}", node_keys_message(keys, network, node_file))]
    NodeKeys {
        keys: Vec<&'static str>,
        network: String,
        node_file: String,
    },
    /// One request to the agent failed.
    #[error("{}", agent_message(agent, request, fault))]
    Agent {
        agent: String,
        request: String,
        fault: AgentFault,
    },
    /// A wait for the agent ran into the call's deadline.
    #[error("gave up after {:.1}s (poll-timeout x poll-retries) waiting for {what}; last: {last}", waited.as_secs_f64())]
    TimedOut {
        waited: Duration,
        what: String,
        last: String,
    },
    /// The node's request budget has no turn for this call before its deadline: the agent is
    /// busy with the node's other calls.
    #[error("gave up after {:.1}s: no turn for {request} in the node's request budget to the agent ({rate} requests a second, contrail.agent-requests-per-second) before this call's deadline (poll-timeout x poll-retries); the next free turn is {:.1}s away: the node's other calls are waiting for the agent too", waited.as_secs_f64(), ahead.as_secs_f64())]
    NoTurn {
        request: String,
        rate: u32,
        ahead: Duration,
        waited: Duration,
    },
    /// Another call held a lock this call needs for longer than this call's deadline: it is
    /// stopped or stuck; the runtime retries.
    #[error("{what}: another call has held it for longer than this call's deadline (poll-timeout x poll-retries, {:.1}s): it may be stopped or stuck; try again later", waited.as_secs_f64())]
    Busy { what: String, waited: Duration },
    /// A DEL of the attachment came while this ADD waited for the agent: the ADD stops.
    #[error("stopped waiting for {what}: a DEL of this attachment came while it was being added")]
    Abandoned { what: String },
    /// STATUS: the agent does not answer at all.
    #[error("vRouter agent at {agent} is unreachable: {why}")]
    Unavailable { agent: String, why: String },
    /// A panic, caught before it reached the caller; its message is in the log.
    #[error("internal error in contrail-k8s-cni; see its log")]
    Internal,
    /// No VMI of the pod fits the attachment.
    #[error("{}", no_vmi_message(vm_name, network, why))]
    NoVmi {
        vm_name: String,
        network: String,
        why: Unresolved,
    },
    #[error(transparent)]
    Link(#[from] netlink::Error),
    /// The interface cannot be made as asked.
    #[error("{0}")]
    Interface(Conflict),
    /// CHECK found the attachment different from what ADD made.
    #[error("{0}")]
    Check(Mismatch),
    /// A failure in one pod's state (GC, the sweep).
    #[error("pod {vm_name}: {source}")]
    Pod { vm_name: String, source: Box<Error> },
    /// Several failures of one call: the first decides its code; the others came while the
    /// call rolled back or went on to the node's other pods.
    #[error("{}", several_message(first, also, *during))]
    Several {
        first: Box<Error>,
        also: Vec<Error>,
        during: During,
    },
}

fn node_keys_message(keys: &[&str], network: &str, node_file: &str) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("contrail.{k}")).collect();
    format!(
        "invalid network config: {}: the config of network {network:?} sets node-scoped \
         settings to other values than the node's; only the node-wide file ({node_file}) may \
         set them: remove them from the network's config (NetworkAttachmentDefinition)",
        keys.join(", ")
    )
}

fn agent_message(agent: &str, request: &str, fault: &AgentFault) -> String {
    match fault {
        AgentFault::Transport(why) => {
            format!("vRouter agent at {agent} did not answer {request}: {why}")
        }
        AgentFault::Status(status) => {
            format!("vRouter agent at {agent} answered {request} with HTTP {status}")
        }
        AgentFault::Refused(why) => format!(
            "vRouter agent at {agent} answered {request} with what this plugin refuses: {why}"
        ),
    }
}

fn no_vmi_message(vm_name: &str, network: &str, why: &Unresolved) -> String {
    match why {
        Unresolved::NoSuchNetwork { known } => format!(
            "pod {vm_name} has no interface on network {network:?}; the agent knows it on: {}. \
             Check that the NetworkAttachmentDefinition name matches the pod's networks \
             annotation",
            known.join(", ")
        ),
        Unresolved::AllTaken { count } => format!(
            "all {count} interface(s) of pod {vm_name} on network {network:?} are already \
             attached under other interface names; the pod references that network fewer times \
             than it is being attached"
        ),
        Unresolved::NoVmis => format!("pod {vm_name} has no VMIs"),
    }
}

fn several_message(first: &Error, also: &[Error], during: During) -> String {
    let also: Vec<String> = also.iter().map(Error::to_string).collect();
    match during {
        During::Rollback => format!("{first}; rolling back also failed: {}", also.join("; ")),
        During::NodeWide => format!("{first}; also: {}", also.join("; ")),
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// The most characters of an error object's `msg`: the longest real message (a rollback that
/// also failed, with its agent and paths) fits; a flood from an answer does not.
const MAX_MSG: usize = 2048;

impl Error {
    pub fn env(var: &str, why: impl fmt::Display) -> Error {
        Error::Env {
            var: var.to_string(),
            why: why.to_string(),
        }
    }

    pub fn config(key: impl fmt::Display, why: impl fmt::Display) -> Error {
        Error::Config {
            key: key.to_string(),
            why: why.to_string(),
        }
    }

    /// An I/O error on `path` while doing `what` ("reading", "writing state in", ...).
    pub fn io(what: &str, path: &std::path::Path) -> impl FnOnce(io::Error) -> Error {
        let what = format!("{what} {}", path.display());
        move |source| Error::Io { what, source }
    }

    /// A failure to take a lock in `path` for `what`: a lock held past the call's deadline
    /// ([`Error::Busy`], which the runtime retries), or an I/O error.
    pub(crate) fn locking(
        what: &str,
        path: &std::path::Path,
        since: std::time::Instant,
    ) -> impl FnOnce(io::Error) -> Error {
        let what = format!("{what} {}", path.display());
        move |source| match source.kind() {
            io::ErrorKind::TimedOut => Error::Busy {
                what: format!("{what}: {source}"),
                waited: since.elapsed(),
            },
            _ => Error::Io { what, source },
        }
    }

    /// `first`, with the failures that came after it `during` something, if any.
    pub(crate) fn with_also(first: Error, also: Vec<Error>, during: During) -> Error {
        if also.is_empty() {
            return first;
        }
        Error::Several {
            first: Box::new(first),
            also,
            during,
        }
    }

    /// `errors` as one: none is fine, one is itself, more are [`Error::Several`].
    pub fn several(errors: Vec<Error>, during: During) -> Result<()> {
        let mut errors = errors.into_iter();
        match errors.next() {
            None => Ok(()),
            Some(first) => Err(Error::with_also(first, errors.collect(), during)),
        }
    }

    /// The CNI error code: the one place where a failure becomes a number.
    pub fn code(&self) -> u32 {
        match self {
            Error::Version(_) => code::INCOMPATIBLE_VERSION,
            Error::Env { .. } => code::INVALID_ENV,
            Error::Io { .. } => code::IO,
            Error::NotJson(_) => code::DECODE,
            Error::Config { .. } | Error::NodeKeys { .. } => code::INVALID_CONFIG,
            Error::Agent {
                fault: AgentFault::Refused(_),
                ..
            } => code::DECODE,
            Error::Agent { .. }
            | Error::TimedOut { .. }
            | Error::NoTurn { .. }
            | Error::Busy { .. } => code::TRY_AGAIN_LATER,
            Error::Unavailable { .. } => code::NOT_AVAILABLE,
            Error::Internal => code::INTERNAL,
            Error::NoVmi { .. } => code::NO_VMI,
            Error::Link(_) | Error::Interface(_) | Error::Abandoned { .. } => code::INTERFACE,
            Error::Check(_) => code::CHECK_FAILED,
            Error::Pod { source, .. } => source.code(),
            Error::Several { first, .. } => first.code(),
        }
    }

    /// Whether asking the agent again may give another answer (a lost connection, a 500);
    /// waits retry these and stop at anything else.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Agent {
                fault: AgentFault::Transport(_) | AgentFault::Status(_),
                ..
            }
        )
    }

    /// The CNI error object for a caller that asked for `version`. Runtimes put `msg` into pod
    /// events that people read, and it may quote what a tenant chose (a network name, an agent
    /// annotation copied from the pod's network selection): escaped and bounded as the log is.
    pub fn to_json(&self, version: &str) -> serde_json::Value {
        let msg = crate::text::escaped(&self.to_string(), MAX_MSG);
        serde_json::json!({"cniVersion": version, "code": self.code(), "msg": msg})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(fault: AgentFault) -> Error {
        Error::Agent {
            agent: "http://127.0.0.1:9091".into(),
            request: "GET /vm-cfg/x".into(),
            fault,
        }
    }

    #[test]
    fn codes_follow_the_cause() {
        let refused = agent(AgentFault::Refused(Malformed::Absent {
            what: "VMI x".into(),
        }));
        assert_eq!(refused.code(), code::DECODE);
        assert!(!refused.is_transient());
        let lost = agent(AgentFault::Transport("timeout".into()));
        assert_eq!(lost.code(), code::TRY_AGAIN_LATER);
        assert!(lost.is_transient());
        assert!(agent(AgentFault::Status(500)).is_transient());
        assert_eq!(
            lost.to_string(),
            "vRouter agent at http://127.0.0.1:9091 did not answer GET /vm-cfg/x: timeout"
        );
        let name_taken = || {
            Error::Interface(Conflict::NameTaken {
                name: "net1".into(),
                netns: "/run/netns/x".into(),
            })
        };
        let rolled = Error::several(vec![name_taken(), Error::Internal], During::Rollback);
        let rolled = rolled.unwrap_err();
        assert_eq!(rolled.code(), code::INTERFACE);
        assert!(matches!(&rolled, Error::Several { first, also, .. }
            if matches!(**first, Error::Interface(Conflict::NameTaken { .. })) && also.len() == 1));
        assert!(
            rolled
                .to_string()
                .contains("; rolling back also failed: internal error")
        );
        assert!(matches!(
            Error::several(vec![name_taken()], During::NodeWide),
            Err(Error::Interface(_))
        ));
        assert!(Error::several(Vec::new(), During::NodeWide).is_ok());
        let pod = Error::Pod {
            vm_name: "k8s__a__b".into(),
            source: Box::new(lost),
        };
        assert_eq!(pod.code(), code::TRY_AGAIN_LATER);
    }

    #[test]
    fn error_object_has_code_and_message() {
        let e = Error::config("contrail.mtu", "must be 68..=65535");
        let j = e.to_json("0.3.1");
        assert_eq!(j["code"], 7);
        assert_eq!(j["cniVersion"], "0.3.1");
        assert!(j["msg"].as_str().unwrap().contains("contrail.mtu"));
    }
}
