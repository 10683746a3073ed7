//! One error type for the whole program. Each variant keeps what went wrong as data (the key,
//! the field, the interface, the path and the operation, the cause: an I/O error, a netlink
//! errno, the agent's status or the kind of its transport failure, a wait that ran out, and
//! what it waited for); the CNI code is chosen in one place ([`Error::code`]) and the message an
//! operator reads is the `Display`. Retrying decides on the kind ([`Error::is_transient`]), never
//! on a code or a message.
//!
//! The leaf modules own the errors of their data and import nothing from here: [`crate::cni`]
//! its [`BadEnv`], [`crate::vmi`] its [`Malformed`] and [`Unresolved`], the kernel its
//! [`Conflict`] and netlink errors, the agent's client its transport failures and HTTP
//! violations. This module wraps them. No third-party type is part of it: what ureq's and
//! serde_json's errors say is kept as their words, so that their next major version changes
//! nothing here.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::agent::http::{Failure, HttpViolation, Request, TransportError};
use crate::agent::wait::{Awaited, Pending};
use crate::cni::SUPPORTED_VERSIONS;
pub use crate::cni::{BadEnv, EnvProblem};
use crate::ids::{IfName, VmName};
pub use crate::kernel::conflict::Conflict;
pub use crate::kernel::interface::Mismatch;
use crate::kernel::netlink;
pub use crate::vmi::Malformed;
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
    Transport(TransportError),
    /// An HTTP status other than 200 and 404. Asking again may help.
    Status(u16),
    /// An answer that breaks HTTP/1.1 or the size bound. Asking again will not help.
    Broken(HttpViolation),
    /// An answer the contract does not allow. Asking again will not help.
    Refused(Box<Malformed>),
}

impl From<Failure> for AgentFault {
    fn from(f: Failure) -> AgentFault {
        match f {
            Failure::Transport(e) => AgentFault::Transport(e),
            Failure::Broken(e) => AgentFault::Broken(e),
        }
    }
}

/// What a wait's last poll saw: an answer that was not the one waited for, or a failure that
/// asking again may mend.
#[derive(Debug)]
pub enum LastPoll {
    NotYet(Pending),
    Failed(Box<Error>),
}

impl fmt::Display for LastPoll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LastPoll::NotYet(pending) => pending.fmt(f),
            LastPoll::Failed(e) => e.fmt(f),
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
    #[error(transparent)]
    Env(#[from] BadEnv),
    /// An I/O error while doing `what` ("reading", "writing state in", ...) on `path`.
    #[error("{what}{}: {source}", path_of(path))]
    Io {
        what: &'static str,
        path: Option<PathBuf>,
        #[source]
        source: io::Error,
    },
    /// Stdin that is not JSON, in the parser's words (where, and what it found).
    #[error("network config on stdin is not JSON: {0}")]
    NotJson(String),
    /// A key of the network's config (or the node's), or a variable the plugin reads, refused,
    /// with why.
    #[error("invalid network config: {key}: {why}")]
    Config { key: String, why: String },
    /// `install`: a destination that names no file.
    #[error("{}: is not a file's path", path.display())]
    NotAFile { path: PathBuf },
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
        request: Request,
        fault: AgentFault,
    },
    /// A wait for the agent ran into the call's deadline.
    #[error("gave up after {:.1}s (poll-timeout x poll-retries) waiting for {what}; last: {last}", waited.as_secs_f64())]
    TimedOut {
        waited: Duration,
        what: Awaited,
        last: LastPoll,
    },
    /// The node's request budget has no turn for this call before its deadline: the agent is
    /// busy with the node's other calls.
    #[error("gave up after {:.1}s: no turn for {request} in the node's request budget to the agent ({rate} requests a second, contrail.agent-requests-per-second) before this call's deadline (poll-timeout x poll-retries); the next free turn is {:.1}s away: the node's other calls are waiting for the agent too", waited.as_secs_f64(), ahead.as_secs_f64())]
    NoTurn {
        request: Request,
        rate: u32,
        ahead: Duration,
        waited: Duration,
    },
    /// Another call held a lock this call needs (`what` on `path`) for longer than this call's
    /// deadline: it is stopped or stuck; the runtime retries.
    #[error("{what} {}: {source}: another call has held it for longer than this call's deadline (poll-timeout x poll-retries, {:.1}s): it may be stopped or stuck; try again later", path.display(), waited.as_secs_f64())]
    Busy {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
        waited: Duration,
    },
    /// A DEL of the attachment came while this ADD waited for the agent: the ADD stops.
    #[error("stopped waiting for {what}: a DEL of this attachment came while it was being added")]
    Abandoned { what: Awaited },
    /// STATUS: the agent does not answer at all.
    #[error("vRouter agent at {agent} is unreachable: {why}")]
    Unavailable { agent: String, why: Failure },
    /// A panic, caught before it reached the caller; its message is in the log.
    #[error("internal error in contrail-k8s-cni; see its log")]
    Internal,
    /// No VMI of the pod fits the attachment (interface `ifname`).
    #[error("{}", no_vmi_message(vm_name, network, ifname, why))]
    NoVmi {
        vm_name: VmName,
        network: String,
        ifname: IfName,
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
    Pod { vm_name: VmName, source: Box<Error> },
    /// Several failures of one call: the first decides its code; the others came while the
    /// call rolled back or went on to the node's other pods.
    #[error("{}", several_message(first, also, *during))]
    Several {
        first: Box<Error>,
        also: Vec<Error>,
        during: During,
    },
}

fn path_of(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map_or(String::new(), |p| format!(" {}", p.display()))
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

fn agent_message(agent: &str, request: &Request, fault: &AgentFault) -> String {
    let refuses = |why: &dyn fmt::Display| {
        format!("vRouter agent at {agent} answered {request} with what this plugin refuses: {why}")
    };
    match fault {
        AgentFault::Transport(why) => {
            format!("vRouter agent at {agent} did not answer {request}: {why}")
        }
        AgentFault::Status(status) => {
            format!("vRouter agent at {agent} answered {request} with HTTP {status}")
        }
        AgentFault::Broken(why) => refuses(why),
        AgentFault::Refused(why) => refuses(why),
    }
}

/// Where the operator's manual says why kube-manager made no VMI for an attachment.
pub(crate) const NO_VMI_DOCS: &str =
    "docs/multus.md#when-kube-manager-made-no-vmi-for-an-attachment";

/// Why no VMI fits, with the causes the call can tell apart. kube-manager makes a pod's VMIs
/// once, when it first sees the pod on a node (tf-controller `vnc_pod.py` `vnc_pod_add`): one
/// for the cluster network and one for each entry of the pod's networks annotation that it reads
/// as naming a NetworkAttachmentDefinition whose inline config has a top-level
/// `"type": "contrail-k8s-cni"` (`kube_config_db.py` `_parse_annotations`,
/// `network_monitor.py`). Its string form is split at `,` and `/`, nothing trimmed, no
/// `@ifname` (Multus trims both and reads `@ifname`). So: a network the pod has no VMI for was
/// skipped (an entry with a space or `@`, a conflist NAD) or added after the pod started
/// (Multus dynamic networks); a network attached more often than it has VMIs lost entries the
/// same way (`net-a, net-a`: the second is " net-a").
fn no_vmi_message(vm_name: &VmName, network: &str, ifname: &IfName, why: &Unresolved) -> String {
    match why {
        Unresolved::NoSuchNetwork { known } => {
            // Multus names a delegate net<k>, or as the annotation asked: in the string form,
            // `net@ifname`, which kube-manager does not read.
            let asked = !(ifname.as_str().strip_prefix("net"))
                .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()));
            let others = "an entry of the string form with a space (write `net-a,net-b`, not \
                          `net-a, net-b`), a NetworkAttachmentDefinition whose config has no \
                          top-level \"type\": \"contrail-k8s-cni\" (a conflist), or a network \
                          added to the pod after it started (Multus dynamic networks: \
                          kube-manager makes VMIs only when a pod starts; recreate the pod)";
            let likely = if asked {
                format!(
                    "an entry `{network}@{ifname}` in the string form (this interface's name is \
                     not Multus's net<k>), which kube-manager reads as a network of that whole \
                     name: write the JSON form, [{{\"name\": \"{network}\", \"interface\": \
                     \"{ifname}\"}}]; or {others}"
                )
            } else {
                others.to_string()
            };
            format!(
                "pod {vm_name} has no VMI on network {network:?} (its VMIs are on: {}): \
                 kube-manager made none for it. Likely {likely}. See {NO_VMI_DOCS}",
                known.join(", ")
            )
        }
        Unresolved::AllTaken { count } => format!(
            "the {count} VMI(s) of pod {vm_name} on network {network:?} are attached under \
             other interface names: the pod is attached to {network:?} more often than \
             kube-manager made VMIs for it. kube-manager reads the string form of the networks \
             annotation without trimming: in `{network}, {network}` the second entry is \
             \" {network}\", which names no NetworkAttachmentDefinition; write \
             `{network},{network}` or the JSON form. See {NO_VMI_DOCS}"
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
    pub fn config(key: impl fmt::Display, why: impl fmt::Display) -> Error {
        Error::Config {
            key: key.to_string(),
            why: why.to_string(),
        }
    }

    /// An I/O error on `path` while doing `what` ("reading", "writing state in", ...).
    pub fn io(what: &'static str, path: &std::path::Path) -> impl FnOnce(io::Error) -> Error {
        let path = Some(path.to_path_buf());
        move |source| Error::Io { what, path, source }
    }

    /// A failure to take a lock in `path` for `what`: a lock held past the call's deadline
    /// ([`Error::Busy`], which the runtime retries), or an I/O error.
    pub(crate) fn locking(
        what: &'static str,
        path: &std::path::Path,
        since: std::time::Instant,
    ) -> impl FnOnce(io::Error) -> Error {
        let path = path.to_path_buf();
        move |source| match source.kind() {
            io::ErrorKind::TimedOut => Error::Busy {
                what,
                path,
                source,
                waited: since.elapsed(),
            },
            _ => Error::Io {
                what,
                path: Some(path),
                source,
            },
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
            Error::Env(_) => code::INVALID_ENV,
            Error::Io { .. } => code::IO,
            Error::NotJson(_) => code::DECODE,
            Error::Config { .. } | Error::NodeKeys { .. } | Error::NotAFile { .. } => {
                code::INVALID_CONFIG
            }
            Error::Agent {
                fault: AgentFault::Refused(_) | AgentFault::Broken(_),
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
            request: Request {
                method: crate::agent::Method::Get,
                path: "/vm-cfg/x".into(),
            },
            fault,
        }
    }

    #[test]
    fn codes_follow_the_cause() {
        let refused = agent(AgentFault::Refused(Box::new(Malformed::Absent {
            what: "VMI x".into(),
        })));
        assert_eq!(refused.code(), code::DECODE);
        assert!(!refused.is_transient());
        let broken = agent(AgentFault::Broken(HttpViolation::ConflictingLengths));
        assert_eq!(broken.code(), code::DECODE);
        assert!(!broken.is_transient());
        let lost = agent(AgentFault::Transport(TransportError::TimedOut {
            after: Duration::from_millis(50),
        }));
        assert_eq!(lost.code(), code::TRY_AGAIN_LATER);
        assert!(lost.is_transient());
        assert!(agent(AgentFault::Status(500)).is_transient());
        assert_eq!(
            lost.to_string(),
            "vRouter agent at http://127.0.0.1:9091 did not answer GET /vm-cfg/x: timed out \
             after 50 ms"
        );
        let name_taken = || {
            Error::Interface(Conflict::NameTaken {
                name: IfName::parse("net1").unwrap(),
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
            vm_name: VmName::parse("k8s__a__b").unwrap(),
            source: Box::new(lost),
        };
        assert_eq!(pod.code(), code::TRY_AGAIN_LATER);
    }

    #[test]
    fn io_and_busy_keep_the_operation_the_path_and_the_errno() {
        let path = std::path::Path::new("/var/lib/cni/contrail");
        let e = Error::io("reading", path)(io::Error::from_raw_os_error(libc::EACCES));
        assert!(
            matches!(&e, Error::Io { what: "reading", path: Some(p), source }
            if p == path && source.raw_os_error() == Some(libc::EACCES))
        );
        assert_eq!(e.code(), code::IO);
        assert!(
            e.to_string().starts_with("reading /var/lib/cni/contrail: "),
            "{e}"
        );
        let since = std::time::Instant::now();
        let busy = Error::locking("locking", path, since)(io::Error::from(io::ErrorKind::TimedOut));
        assert!(matches!(
            &busy,
            Error::Busy {
                what: "locking",
                ..
            }
        ));
        assert_eq!(busy.code(), code::TRY_AGAIN_LATER);
        assert!(
            busy.to_string()
                .starts_with("locking /var/lib/cni/contrail: "),
            "{busy}"
        );
        let other = Error::locking("locking", path, since)(io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(other, Error::Io { .. }));
    }

    #[test]
    fn waits_name_what_they_waited_for() {
        let e = Error::TimedOut {
            waited: Duration::from_millis(1500),
            what: Awaited::PodInterfaces {
                vm_name: crate::ids::VmName::parse("k8s__a__b").unwrap(),
            },
            last: LastPoll::NotYet(Pending::SomeKnown {
                vm_name: crate::ids::VmName::parse("k8s__a__b").unwrap(),
                known: 1,
                of: 2,
            }),
        };
        assert_eq!(e.code(), code::TRY_AGAIN_LATER);
        assert!(!e.is_transient());
        assert_eq!(
            e.to_string(),
            "gave up after 1.5s (poll-timeout x poll-retries) waiting for the agent to know \
             every interface of pod k8s__a__b; last: GET /vm-cfg/k8s__a__b: 1 of 2 interfaces \
             known"
        );
        let stopped = Error::Abandoned {
            what: Awaited::Turn(Request {
                method: crate::agent::Method::Post,
                path: "/vm".into(),
            }),
        };
        assert_eq!(stopped.code(), code::INTERFACE);
        assert!(
            stopped
                .to_string()
                .starts_with("stopped waiting for POST /vm: ")
        );
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
