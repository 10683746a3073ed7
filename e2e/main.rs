//! The end-to-end tests: the real release binary, run as runtimes run it (environment and stdin,
//! libcni, podman, CRI-O through crictl), each test in a node of its own (private network and
//! mount namespaces, see `contrail_testkit::enter_node`) against the agent simulator. One test
//! binary with a module per area; nested mode (`nested.rs`, in a VM) and containerd's CRI
//! (`cri/`, feature `cri`) are binaries of their own. What each module proves: docs/testing.md.

mod agent_sim;
mod agent_sim_port;
mod budget;
mod combos;
mod crash;
mod crio;
mod deploy;
mod dpdk_rig;
mod examples;
mod faults;
mod genie;
mod hardening;
mod hazards;
mod legacy;
mod libcni;
mod metaplugin;
mod multus;
mod ops;
mod plugin;
mod podman;
mod resilience;
mod stress;
mod tamper;
mod thick;
mod trust;
mod vhost_hardening;
mod vhost_user;
