//! A misbehaving vRouter agent's transport and status: an agent that accepts and never answers,
//! answers slower than the request timeout, answers 500, garbage or a cut-off answer, on
//! `/vm-cfg`, on the IP configuration, on the registration and on the deregistration. Each ADD
//! must fail with the right code within its bound, say what to look at, and leave nothing
//! behind.

use std::time::Duration;

use contrail_testkit::*;
use serde_json::json;

use super::{Case, SLACK, add_bound, one_vmi_pod, timed};

#[test]
fn agent_accepting_and_never_answering_times_out_with_code_11() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--hang", "GET:/vm-cfg/"]);
    let path = format!("GET /vm-cfg/{}", pod.vm_name());
    let msg = c.add_fails(11, add_bound(), &[&c.agent(), "waiting for", &path]);
    assert!(msg.contains("every interface of pod"), "{msg}");
    assert!(
        msg.contains("timeout") || msg.contains("timed out"),
        "{msg}"
    );
}

#[test]
fn agent_slower_than_the_request_timeout_times_out_with_code_11() {
    let pod = one_vmi_pod();
    // Each answer comes 0.5 s after its request, each request gives up after 0.2 s.
    let mut c = Case::new(pod.clone(), &["--delay-ms", "500"]);
    let path = format!("GET /vm-cfg/{}", pod.vm_name());
    let msg = c.add_fails(11, add_bound(), &[&c.agent(), "waiting for", &path]);
    assert!(
        msg.contains("timeout") || msg.contains("timed out"),
        "{msg}"
    );
}

#[test]
fn http_500_on_vm_cfg_times_out_with_code_11() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--fail", "GET:/vm-cfg/:500"]);
    let path = format!("GET /vm-cfg/{}", pod.vm_name());
    c.add_fails(
        11,
        add_bound(),
        &[&c.agent(), "waiting for", &path, "HTTP 500"],
    );
}

#[test]
fn malformed_json_on_vm_cfg_ends_the_wait_with_code_6() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--garbage", "GET:/vm-cfg/"]);
    // A budget of 20 s: failing well within it shows that garbage is not waited out.
    c.fx.set("poll-retries", json!(100));
    let path = format!("GET /vm-cfg/{}", pod.vm_name());
    let msg = c.add_fails(6, Duration::ZERO, &[&c.agent(), &path]);
    assert!(msg.contains("invalid JSON"), "{msg}");
}

#[test]
fn truncated_answer_on_vm_cfg_is_retried_then_code_11() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--truncate", "GET:/vm-cfg/"]);
    let path = format!("GET /vm-cfg/{}", pod.vm_name());
    c.add_fails(11, add_bound(), &[&c.agent(), "waiting for", &path]);
}

#[test]
fn hang_on_the_ip_config_rolls_the_claim_back() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--hang", "GET:/vm/"]);
    let path = format!("GET /vm/{}/{}", pod.uuid, pod.vmis[0].uuid);
    let msg = c.add_fails(11, add_bound(), &[&c.agent(), "waiting for", &path]);
    assert!(msg.contains("IP address of VMI"), "{msg}");
}

#[test]
fn a_deregistration_the_agent_never_answers_is_recorded_and_finished_later() {
    // The IP configuration never comes and the rollback's DELETE hangs too: the ADD still ends
    // within its bound, and the registration it could not drop is recorded, not forgotten.
    let pod = one_vmi_pod();
    let mut c = Case::new(
        pod.clone(),
        &["--hang", "GET:/vm/", "--hang", "DELETE:/vm/"],
    );
    let (out, took) = c.call("ADD", None);
    assert_eq!(out.code(), 11, "{}", out.stdout);
    assert!(took < add_bound() + SLACK, "took {took:?}");
    assert_eq!(c.fx.ns.ifnames(), ["lo"]);
    assert!(!host_link_exists(&host_ifname(&pod.vmis[0].uuid)));
    assert_eq!(c.fx.node.state_files(&pod), [] as [String; 0]);
    let ports = c.fx.sim.ports();
    assert_eq!(ports.len(), 1, "the agent never processed the DELETE");
    assert_eq!(c.fx.node.pending(&pod), [pod.vmis[0].uuid.clone()]);
    assert_eq!(c.fx.node.reservations(&pod), [pod.vmis[0].uuid.clone()]);
    // The agent recovers; Multus's DEL of the failed delegate finishes the deregistration.
    c.fx.restart_agent(&[]);
    c.ok("DEL", None);
    c.assert_nothing_left();
}

#[test]
fn garbage_on_the_ip_config_rolls_the_claim_back_with_code_6() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--garbage", "GET:/vm/"]);
    let path = format!("GET /vm/{}/{}", pod.uuid, pod.vmis[0].uuid);
    let msg = c.add_fails(6, add_bound(), &[&c.agent(), &path]);
    assert!(msg.contains("invalid JSON"), "{msg}");
}

#[test]
fn registration_whose_answer_is_cut_off_is_rolled_back_and_deregistered() {
    // The agent registers the port, but the plugin never learns it did: the rollback must
    // remove the interface and deregister the pod, or the agent keeps a port with no veth.
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--truncate", "POST:/vm"]);
    let msg = c.add_fails(
        11,
        add_bound(),
        &[&c.agent(), "waiting for", "POST /vm", &pod.vmis[0].uuid],
    );
    assert!(msg.contains(&host_ifname(&pod.vmis[0].uuid)), "{msg}");
}

#[test]
fn many_attachments_of_one_network_with_a_hanging_agent_stay_within_the_bound() {
    // Telling repeated attachments of one network apart asks the agent about the VMI to take;
    // with every such request hanging (and the IP wait after it), the ADD must still end within
    // poll-timeout x poll-retries (here 1 s).
    let mut vmis = vec![VmiSpec::new("default", 1)];
    vmis.extend((2..18).map(|n| VmiSpec::new("net-a", n)));
    let pod = PodSpec::new(vmis);
    let mut c = Case::new(pod, &["--hang", "GET:/vm/"]);
    c.fx.set("poll-timeout", json!(0.5))
        .set("poll-retries", json!(2));
    let bound = Duration::from_millis(500 * 2 + 500);
    let conf = c.fx.conf("net-a");
    let (out, took) = timed(|| c.fx.call("ADD", "net1", &conf));
    assert_eq!(out.code(), 11, "{}", out.stdout);
    let msg = out.msg();
    assert!(
        took < bound + SLACK,
        "took {took:?}, bound {bound:?}: {msg}"
    );
    assert!(
        msg.contains(&c.agent()) && msg.contains("waiting for"),
        "{msg}"
    );
    c.fx.assert_rolled_back();
}
