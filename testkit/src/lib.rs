//! The end-to-end tests' harness: runs the real release binary as a runtime does (environment
//! and stdin), in network namespaces the test creates and always removes, against the agent
//! simulator; every test in a node of its own ([`enter_node`]), so that no test touches the
//! machine's network namespace or sees another test's links.

// `new()` makes a namespace, a directory or a process: an effect, not a default value.
#![allow(clippy::new_without_default)]

pub mod cluster;
pub mod legacy;
pub mod procfs;

mod bins;
mod cni;
mod crash;
mod delegate;
mod files;
mod fixture;
mod genie;
mod image;
mod kube;
mod multus;
mod netns;
mod node;
mod pod;
mod sim;
mod testpmd;
mod watch;

pub use bins::*;
pub use cni::*;
pub use crash::*;
pub use delegate::*;
pub use files::*;
pub use fixture::*;
pub use genie::*;
pub use image::*;
pub use kube::*;
pub use multus::*;
pub use netns::*;
pub use node::*;
pub use pod::*;
pub use sim::*;
pub use testpmd::*;
pub use watch::*;
