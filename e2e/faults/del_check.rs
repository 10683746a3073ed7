//! DEL and CHECK without a usable agent (down, or hanging on the deregistration): DEL tears
//! down locally within its bound and records what it left registered. And answers the plugin
//! must read with care: VMIs that cannot be one pod's (refused at once), `default-gw` values,
//! and an error object that escapes and bounds what an answer carries.

use contrail_testkit::*;

use super::{Case, SLACK, add_bound, annotate, crafted, crafted_answer, one_vmi_pod, poll_timeout};

#[test]
fn del_without_the_agent_tears_down_locally() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &[]);
    let r = c.ok("ADD", None).json();
    let tap = host_ifname(&pod.vmis[0].uuid);
    assert!(host_link_exists(&tap));
    let agent = c.agent();
    // The agent goes away (restarting, crashed): nothing listens on its port any more.
    c.fx.stop_agent();

    // CHECK cannot confirm the registration: it fails, naming the agent, and changes nothing.
    let (out, took) = c.call("CHECK", Some(&r));
    assert_eq!(out.code(), 11, "{}", out.stdout);
    assert!(out.msg().contains(&agent), "{}", out.msg());
    assert!(took < poll_timeout() + SLACK, "{took:?}");
    assert_eq!(c.fx.ns.ifnames(), ["eth0", "lo"]);

    // DEL tears down locally at once; the deregistration is retried within the call's
    // deadline, then recorded for the next call for the pod or GC.
    let (out, took) = c.call("DEL", Some(&r));
    out.assert_ok();
    assert!(took < add_bound() + SLACK, "{took:?}");
    assert_eq!(c.fx.ns.ifnames(), ["lo"]);
    assert!(!host_link_exists(&tap));
    assert_eq!(c.fx.node.state_files(&pod), [] as [String; 0]);
    assert_eq!(c.fx.node.pending(&pod), [pod.vmis[0].uuid.clone()]);
    let log = std::fs::read_to_string(c.fx.node.config_dir.0.join("cni.log")).unwrap();
    assert!(log.contains("left registered with the agent"), "{log}");

    // Nothing is recorded any more: CHECK fails, a repeated DEL succeeds.
    let (out, _) = c.call("CHECK", Some(&r));
    assert_eq!(out.code(), 103, "{}", out.stdout);
    c.call("DEL", Some(&r)).0.assert_ok();
}

#[test]
fn del_with_a_hanging_agent_finishes_in_time() {
    let pod = one_vmi_pod();
    let mut c = Case::new(pod.clone(), &["--hang", "DELETE:/vm/"]);
    let r = c.ok("ADD", None).json();
    let (out, took) = c.call("DEL", Some(&r));
    out.assert_ok();
    // The deregistration is retried within poll-timeout x poll-retries, no longer.
    assert!(took < add_bound() + SLACK, "{took:?}");
    assert_eq!(c.fx.ns.ifnames(), ["lo"]);
    assert!(!host_link_exists(&host_ifname(&pod.vmis[0].uuid)));
    assert_eq!(c.fx.node.state_files(&pod), [] as [String; 0]);
    let log = std::fs::read_to_string(c.fx.node.config_dir.0.join("cni.log")).unwrap();
    assert!(log.contains("left registered with the agent"), "{log}");
    // The agent never processed the DELETE: the port is still registered there, and the
    // node says so until a later call gets the DELETE through.
    let ports = c.fx.sim.ports();
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(c.fx.node.pending(&pod), [pod.vmis[0].uuid.clone()]);
    c.call("DEL", Some(&r)).0.assert_ok();
}

#[test]
fn vmis_that_cannot_be_one_pods_are_refused_at_once() {
    // Two VMIs with one index, or announcing different counts, never become a whole pod:
    // refused at once with code 6 naming the problem, not waited for until the deadline.
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let cases: [(&str, &str, &str); 2] = [
        ("0/2", "0/2", "repeats the index of another VMI"),
        ("0/2", "1/3", "announces another count of interfaces"),
    ];
    for (first, second, words) in cases {
        let (files, args) = crafted_answer(&pod, "vm-cfg", |body| {
            annotate(&mut body[0], "index", first);
            annotate(&mut body[1], "index", second);
        });
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut c = Case::with_files(pod.clone(), files, &args);
        // At once: well within one poll-timeout, where waiting takes all of poll-retries.
        c.add_fails(6, poll_timeout(), &[words, "index annotation"]);
    }
}

#[test]
fn default_gw_takes_yes_or_no_and_ignores_other_values() {
    // A `default-gw` of "no" on net-a's VMI is no: the cluster network's eth0 gets the pod's
    // default route. A value that is neither is ignored, and said so in the log.
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    for value in ["no", "perhaps"] {
        let net_a = pod.vmis[1].uuid.clone();
        let (files, args) = crafted_answer(&pod, "vm-cfg", |body| {
            for vmi in body.as_array_mut().unwrap() {
                if vmi["id"] == net_a.as_str() {
                    annotate(vmi, "default-gw", value);
                }
            }
        });
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut c = Case::with_files(pod.clone(), files, &args);
        let r = c.ok("ADD", None).json();
        let defaults = c.fx.ns.default_routes();
        assert!(
            defaults
                .iter()
                .any(|(family, _, dev)| family == "-4" && dev == "eth0"),
            "{value}: {defaults:?}"
        );
        if value == "perhaps" {
            let log = c.fx.node.log();
            assert!(log.contains("ignoring its default-gw annotation"), "{log}");
        }
        c.ok("DEL", Some(&r));
        c.assert_nothing_left();
    }
}

#[test]
fn an_error_object_escapes_and_bounds_what_an_answer_carries() {
    // kube-manager copies the pod's network selection into the VMI's `network` annotation:
    // runtimes put the error message into pod events that people read.
    let pod = one_vmi_pod();
    let hostile = format!("evil\u{1b}[2J\nADD ok in 0.1 ms {}", "A".repeat(20_000));
    let (files, args) = crafted(&pod, "vm-cfg", |vmi| annotate(vmi, "network", &hostile));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut c = Case::with_files(pod, files, &args);
    let out = c.fx.call("ADD", "eth0", &c.fx.conf("net-a"));
    assert_eq!(out.code(), 101, "{}", out.stdout);
    let msg = out.msg();
    assert!(!msg.chars().any(char::is_control), "{msg:?}");
    assert!(msg.contains("evil\\u{1b}[2J\\nADD ok"), "{msg}");
    assert!(
        msg.chars().count() < 2100,
        "{} characters",
        msg.chars().count()
    );
    c.ok("DEL", None);
    c.assert_nothing_left();
}
