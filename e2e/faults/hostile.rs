//! Hostile agent answers, crafted from an unfaulted agent's own (whose unedited copy is the
//! control, and succeeds): a VMI id with path components or in uppercase, multicast or all-zero
//! MACs, an index beyond the count, prefix lengths and addresses out of range, each refused
//! with code 6 at once, naming the field and never quoting the answer, with nothing left
//! behind; and generated hostile strings in every field of both answers (path tricks, request
//! smuggling, control characters, floods), which must end within the bound with an escaped,
//! bounded message and a clean log.

use contrail_testkit::*;
use serde_json::{Value, json};

use super::{Case, SLACK, add_bound, annotate, crafted, one_vmi_pod};

fn hostile_case(pod: PodSpec, which: &str, edit: impl FnOnce(&mut Value)) -> Case {
    let (files, args) = crafted(&pod, which, edit);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Case::with_files(pod, files, &args)
}

/// ADD against a hostile answer on `which` ("vm-cfg", or "vm" after the claim): code 6 at
/// once, naming the agent, the request and `words` (the field and the kind of problem), never
/// quoting the `foreign` bytes of the answer, with nothing left behind.
#[track_caller]
fn hostile(
    pod: &PodSpec,
    which: &str,
    edit: impl FnOnce(&mut Value),
    words: &[&str],
    foreign: Option<&str>,
) -> String {
    let mut c = hostile_case(pod.clone(), which, edit);
    let path = match which {
        "vm-cfg" => format!("GET /vm-cfg/{}", pod.vm_name()),
        _ => format!("GET /vm/{}/{}", pod.uuid, pod.vmis[0].uuid),
    };
    let agent = c.agent();
    let mut all = vec![agent.as_str(), path.as_str()];
    all.extend_from_slice(words);
    let msg = c.add_fails(6, add_bound(), &all);
    if let Some(foreign) = foreign {
        assert!(
            !msg.contains(foreign),
            "the message quotes the answer's {foreign:?}: {msg}"
        );
    }
    msg
}

/// One field of the VMI's object in the answer on `which` set to `value`.
#[track_caller]
fn hostile_field(pod: &PodSpec, which: &str, key: &str, value: &str, words: &[&str]) {
    // A number is not looked for in the message: its digits may be in a uuid or a port.
    let v: Value = serde_json::from_str(value).unwrap_or_else(|_| json!(value));
    let foreign = (!v.is_number()).then_some(value);
    hostile(pod, which, |vmi| vmi[key] = v, words, foreign);
}

#[test]
fn crafted_answers_equal_to_the_agents_own_work() {
    // The control for the hostile cases: the same mechanism with nothing edited succeeds, and
    // the host end is the one `host_ifname` computes.
    let pod = one_vmi_pod();
    let mut c = hostile_case(pod.clone(), "", |_| {});
    let r = c.ok("ADD", None).json();
    assert_eq!(r["interfaces"][0]["name"], host_ifname(&pod.vmis[0].uuid));
    assert_eq!(c.fx.ns.mac("eth0"), pod.vmis[0].mac);
    c.ok("DEL", Some(&r));
    c.assert_nothing_left();
}

#[test]
fn vmi_id_with_path_components_is_refused() {
    let pod = one_vmi_pod();
    // From the pod's state dir (<tmp>/ck8s-test-*/ports/<vm-name>), `../../../x` is <tmp>/x.
    let tmp = std::env::temp_dir();
    let injected = format!("ck8s-injected-{}", tag());
    let passwd = std::fs::read("/etc/passwd").unwrap();
    for id in [
        "../../../etc/passwd".to_string(),
        format!("../../../{injected}"),
        tmp.join(&injected).display().to_string(),
    ] {
        hostile_field(
            &pod,
            "vm-cfg",
            "id",
            &id,
            &["whose id is not a lowercase uuid"],
        );
        for p in [tmp.join("etc/passwd"), tmp.join(&injected)] {
            assert!(!p.exists(), "{} was created for id {id:?}", p.display());
        }
        assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);
        assert!(!host_link_exists(&host_ifname(&id)));
    }
}

#[test]
fn uppercase_vmi_id_is_refused() {
    let pod = one_vmi_pod();
    let upper = pod.vmis[0].uuid.to_uppercase();
    hostile_field(
        &pod,
        "vm-cfg",
        "id",
        &upper,
        &["whose id is not a lowercase uuid"],
    );
}

#[test]
fn multicast_mac_in_vm_cfg_is_refused() {
    let words = ["whose mac-address is not a unicast MAC"];
    hostile_field(
        &one_vmi_pod(),
        "vm-cfg",
        "mac-address",
        "01:00:5e:00:00:01",
        &words,
    );
}

#[test]
fn index_beyond_the_count_is_refused() {
    let set_index = |vmi: &mut Value| annotate(vmi, "index", "5/2");
    let words = ["whose index annotation is not k/N"];
    hostile(&one_vmi_pod(), "vm-cfg", set_index, &words, Some("5/2"));
}

#[test]
fn prefix_length_33_is_refused() {
    hostile_field(
        &one_vmi_pod(),
        "vm",
        "plen",
        "33",
        &["whose plen is not 1..=32"],
    );
}

#[test]
fn ipv4_address_out_of_range_is_refused() {
    let words = ["whose ip-address is not an address"];
    hostile_field(&one_vmi_pod(), "vm", "ip-address", "300.1.1.1", &words);
}

#[test]
fn ipv6_prefix_length_200_is_refused() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1).dual_stack()]);
    hostile_field(
        &pod,
        "vm",
        "v6-plen",
        "200",
        &["whose v6-plen is not 1..=128"],
    );
}

#[test]
fn all_zero_mac_in_the_ip_config_is_refused() {
    let words = ["whose mac-address is not a unicast MAC"];
    hostile_field(
        &one_vmi_pod(),
        "vm",
        "mac-address",
        "00:00:00:00:00:00",
        &words,
    );
}

// ---------------------------------------------------------------- hostile strings, generated

/// What an agent's answer may carry that a tenant wrote (kube-manager copies a pod's network
/// selection into annotations) or that is simply broken: path tricks, request smuggling, line
/// and terminal control, NUL, a flood, bidirectional overrides, shell words, nothing at all.
const HOSTILE: [&str; 12] = [
    "../../../etc/passwd",
    "a/b",
    "x\r\nHost: evil",
    "line\nforged ADD ok in 0.1 ms",
    "\u{1b}[2J\u{1b}[31mred",
    "nul\u{0}byte",
    "%2e%2e%2f%0d%0a",
    "\u{202e}txt.exe",
    "'; rm -rf / #",
    "",
    " ",
    "\u{1f642}é",
];

/// Fields of one VMI in `/vm-cfg` (`@` marks an annotation) and in its IP configuration.
const CFG_FIELDS: [&str; 12] = [
    "id",
    "vm-uuid",
    "vn-id",
    "mac-address",
    "vlan-id",
    "@network",
    "@namespace",
    "@name",
    "@index",
    "@interface",
    "@default-gw",
    "@cluster",
];
const IP_FIELDS: [&str; 11] = [
    "ip-address",
    "plen",
    "gateway",
    "dns-server",
    "v6-ip-address",
    "v6-gateway",
    "v6-dns-server",
    "system-name",
    "instance-id",
    "mac-address",
    "rx-vlan-id",
];

/// One generated case: a hostile string in one field of one answer, drawn from `seed`.
fn hostile_string_case(seed: u64) -> (&'static str, &'static str, String) {
    let mut rng = Rng(seed);
    let which = if rng.chance(50) { "vm-cfg" } else { "vm" };
    let fields: &[&str] = if which == "vm-cfg" {
        &CFG_FIELDS
    } else {
        &IP_FIELDS
    };
    let field = *rng.pick(fields);
    let mut value = rng.pick(&HOSTILE).to_string();
    if rng.chance(15) {
        value = value.repeat(1 + 20_000 / value.len().max(1));
    }
    (which, field, value)
}

/// Whatever the hostile string, the call ends within its bound; a refusal is an error object
/// with a known code whose message is escaped and bounded; the node's log stays one line per
/// record, without control characters; the registrations follow the state files; its DEL
/// leaves nothing.
fn hostile_string(seed: u64) {
    let (which, field, value) = hostile_string_case(seed);
    let pod = one_vmi_pod();
    let edit = |vmi: &mut Value| match field.strip_prefix('@') {
        Some(key) => annotate(vmi, key, &value),
        None => vmi[field] = json!(value),
    };
    let mut c = hostile_case(pod, which, edit);
    let (out, took) = c.call("ADD", None);
    assert!(took < add_bound() + SLACK, "took {took:?}");
    if !out.ok {
        assert!([6, 7, 11, 101, 102].contains(&out.code()), "{}", out.stdout);
        let msg = out.msg();
        assert!(!msg.chars().any(char::is_control), "{msg:?}");
        assert!(msg.chars().count() < 2100, "{} characters", msg.len());
    }
    c.fx.assert_registrations_follow_files();
    let log = c.fx.node.log();
    for line in log.lines() {
        assert!(!line.chars().any(char::is_control), "{line:?}");
        // A record of at most 8 KiB, after its timestamp and level, and the cut's mark.
        assert!(
            line.len() <= 8 * 1024 + 128,
            "a line of {} bytes",
            line.len()
        );
    }
    c.ok("DEL", None);
    c.assert_nothing_left();
}

fn hostile_strings(shard: u64) {
    for_each_seed(
        "CONTRAIL_HOSTILE_SEED",
        "faults::hostile::hostile_strings",
        6,
        shard,
        |seed| {
            let (which, field, value) = hostile_string_case(seed);
            let shown: String = value.chars().take(40).collect();
            format!("{which} {field}: {shown:?} ({} bytes)", value.len())
        },
        hostile_string,
    );
}

#[test]
fn hostile_strings_0() {
    hostile_strings(0);
}

#[test]
fn hostile_strings_1() {
    hostile_strings(1);
}

#[test]
fn hostile_strings_2() {
    hostile_strings(2);
}
