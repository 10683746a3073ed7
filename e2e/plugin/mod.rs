//! Plugin mode end to end: the release binary, called as Multus calls a delegate, in real
//! network namespaces, against the agent simulator.
//!
//! By area: `attach` (what ADD, CHECK and DEL make of a pod as Multus calls them: repeated
//! networks with IPv6, numbering, annotations, results per CNI version, DEL idempotency, DEL
//! from an older sandbox, concurrent ADDs, node-wide defaults, the log), `failures` (what a
//! failed call leaves: failures before and after the registration, rollback, a VMI kept for
//! its retry, bad config and environment, CHECK against a prevResult the pod does not match).

mod attach;
mod failures;
