#!/bin/sh
# A network namespace on the pod network by hand, with cnitool (libcni 1.3: add, check, del,
# status, gc), as a runtime attaches a sandbox: the network config is the one named
# contrail-k8s-cni in NETCONFPATH (the shipped netconf/contrail.conflist, installed as
# 05-contrail.conflist beside the node-wide 10-contrail.conf), the plugins in CNI_PATH. The pod
# must be one kube-manager made VMIs for: the plugin finds them by its namespace and name.
# cnitool derives the container id from the netns path and keeps its results in /var/lib/cni.
#
#   examples/cnitool/attach.sh add /var/run/netns/test default my-pod
#
# Proven by e2e/examples.rs (the_cnitool_example_attaches_checks_and_releases_a_netns).
set -eu
if [ $# -ne 4 ]; then
  echo "usage: $0 add|check|del|status|gc NETNS POD_NAMESPACE POD_NAME" >&2
  exit 2
fi
NETCONFPATH=${NETCONFPATH:-/etc/cni/net.d}
CNI_PATH=${CNI_PATH:-/opt/cni/bin}
CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=$3;K8S_POD_NAME=$4"
export NETCONFPATH CNI_PATH CNI_ARGS
exec cnitool "$1" contrail-k8s-cni "$2"
