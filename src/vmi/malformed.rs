//! What is wrong with an answer of the agent that its parsers refuse.

use std::fmt;

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
        }
    }
}
