//! One error type for the whole program. Each variant keeps what went wrong in terms of its
//! cause (an I/O error, a netlink errno, the agent's status, a refused answer, a wait that ran
//! out); the CNI code is chosen in one place ([`Error::code`]) and the message an operator reads
//! is the `Display`. Retrying decides on the kind ([`Error::is_transient`]), never on a code.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::cni::SUPPORTED_VERSIONS;
use crate::netlink;

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
    /// CHECK found the attachment different from what ADD created.
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
    Refused(String),
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
    /// Input that is not what the protocol says (stdin that is not JSON, an agent answer that
    /// breaks the contract).
    #[error("{0}")]
    Decode(String),
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
    /// A DEL of the attachment came while this ADD waited for the agent: the ADD stops.
    #[error("stopped waiting for {what}: a DEL of this attachment came while it was being added")]
    Abandoned { what: String },
    /// STATUS: the agent does not answer at all.
    #[error("vRouter agent at {agent} is unreachable: {why}")]
    Unavailable { agent: String, why: String },
    #[error("{0}")]
    Internal(String),
    /// No VMI of the pod fits the attachment.
    #[error("{0}")]
    NoVmi(String),
    #[error(transparent)]
    Link(#[from] netlink::Error),
    /// The interface cannot be made as asked (the name is taken, it vanished, ...).
    #[error("{0}")]
    Interface(String),
    /// CHECK found the attachment different from what ADD made.
    #[error("{0}")]
    Check(String),
    /// A failure whose rollback failed too: the failure's code, every message.
    #[error("{error}; rolling back also failed: {}", join(also))]
    RolledBack { error: Box<Error>, also: Vec<Error> },
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

fn node_keys_message(keys: &[&str], network: &str, node_file: &str) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("contrail.{k}")).collect();
    format!(
        "invalid network config: {}: the config of network {network:?} sets node-scoped \
         settings to other values than the node's; only the node-wide file {node_file} may set \
         them: remove them from the network's config (NetworkAttachmentDefinition)",
        keys.join(", ")
    )
}

fn join(errors: &[Error]) -> String {
    errors
        .iter()
        .map(Error::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

pub type Result<T> = std::result::Result<T, Error>;

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

    pub fn decode(what: impl fmt::Display) -> Error {
        Error::Decode(what.to_string())
    }

    /// An I/O error on `path` while doing `what` ("reading", "writing state in", ...).
    pub fn io(what: &str, path: &std::path::Path) -> impl FnOnce(io::Error) -> Error {
        let what = format!("{what} {}", path.display());
        move |source| Error::Io { what, source }
    }

    /// The CNI error code: the one place where a failure becomes a number.
    pub fn code(&self) -> u32 {
        match self {
            Error::Version(_) => code::INCOMPATIBLE_VERSION,
            Error::Env { .. } => code::INVALID_ENV,
            Error::Io { .. } => code::IO,
            Error::Decode(_) => code::DECODE,
            Error::Config { .. } | Error::NodeKeys { .. } => code::INVALID_CONFIG,
            Error::Agent {
                fault: AgentFault::Refused(_),
                ..
            } => code::DECODE,
            Error::Agent { .. } | Error::TimedOut { .. } => code::TRY_AGAIN_LATER,
            Error::Unavailable { .. } => code::NOT_AVAILABLE,
            Error::Internal(_) => code::INTERNAL,
            Error::NoVmi(_) => code::NO_VMI,
            Error::Link(_) | Error::Interface(_) | Error::Abandoned { .. } => code::INTERFACE,
            Error::Check(_) => code::CHECK_FAILED,
            Error::RolledBack { error, .. } => error.code(),
        }
    }

    /// Whether asking the agent again may give another answer (a lost connection, a 500);
    /// waits retry these and stop at anything else.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Agent {
                fault: AgentFault::Transport(_) | AgentFault::Status(_),
                ..
            }
        )
    }

    /// The CNI error object for a caller that asked for `version`.
    pub fn to_json(&self, version: &str) -> serde_json::Value {
        serde_json::json!({"cniVersion": version, "code": self.code(), "msg": self.to_string()})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_cause() {
        let agent = |fault| Error::Agent {
            agent: "http://127.0.0.1:9091".into(),
            request: "GET /vm-cfg/x".into(),
            fault,
        };
        let refused = agent(AgentFault::Refused("bad".into()));
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
        let rolled = Error::RolledBack {
            error: Box::new(Error::Interface("net1 exists".into())),
            also: vec![Error::Internal("x".into())],
        };
        assert_eq!(rolled.code(), code::INTERFACE);
        assert_eq!(
            rolled.to_string(),
            "net1 exists; rolling back also failed: x"
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
