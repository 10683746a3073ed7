//! The generators (and the one constant) that more than one area's properties use: values on
//! the edges of what the parsers accept, JSON values, keys and fields, names, uuids, the
//! `contrail` section's keys, absolute paths and interface names.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Number, Value};

use contrail_k8s_cni::config;
use contrail_testkit::uuid_of;

/// Values that sit on the edges of what the parsers accept: paths, numbers as strings, names,
/// addresses, versions, separators and control characters.
const TRICKY: &[&str] = &[
    "",
    " ",
    ".",
    "..",
    "/",
    "//",
    "/..",
    "/a/..",
    "/a/../b",
    "../etc",
    "a/b",
    "/var/../etc",
    "/var/lib/contrail/ports/vm",
    "/./x",
    "/a/.../b",
    "/a\0b",
    "\0",
    "a\0",
    "\u{b}",
    "a\u{b}b",
    "a\u{a0}b",
    "a\u{85}b",
    "\u{2028}",
    "é",
    "à",
    "\u{202e}x",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "infinity",
    "1e400",
    "-1e400",
    "1e-400",
    "-0",
    "0",
    "1",
    "+5",
    "0x10",
    " 1500 ",
    "1500.0",
    "1500.5",
    "68",
    "67",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "18446744073709551616",
    "0.001",
    "0.0009",
    "3600",
    "3600.0001",
    "10000",
    "10001",
    "1e3",
    "k8s",
    "default",
    "contrail-k8s-cni",
    "plugin",
    "thick",
    "veth",
    "macvlan",
    "info",
    " TRACE ",
    "off",
    "6",
    "7",
    "127.0.0.1",
    "::1",
    "0.0.0.0",
    "::",
    "localhost",
    "1.0.0",
    "0.3.1",
    "0.2.0",
    "1.1.0",
    "true",
    "false",
    "null",
    ";",
    "=",
    "a=b",
    ";;=;",
    "K8S_POD_NAME=x",
    "{index:0/1}",
    "{interface:eth0}",
];

pub(crate) fn tricky_string() -> BoxedStrategy<String> {
    prop_oneof![
        4 => select(TRICKY).prop_map(String::from),
        2 => any::<String>(),
        2 => "[ -~]{0,24}",
        1 => "[\\x00-\\x1f /.:;={}\u{a0}\u{85}é0-9a-z-]{0,16}",
        1 => any::<f64>().prop_map(|f| f.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
    ]
    .boxed()
}

fn json_number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-100_000i64..100_000).prop_map(Value::from),
        any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (-10.0f64..70_000.0).prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
    ]
    .boxed()
}

fn json_leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        json_number(),
        tricky_string().prop_map(Value::String),
    ]
    .boxed()
}

/// Object keys: mostly ones some parser looks for (these and [`contrail_keys`]), so that random
/// documents reach deep code.
const KEYS: &[&str] = &[
    "cniVersion",
    "name",
    "type",
    "contrail",
    "prevResult",
    "runtimeConfig",
    "args",
    "cni.dev/valid-attachments",
    "cni.dev/attachments",
    "containerID",
    "ifname",
    "id",
    "vm-uuid",
    "vn-id",
    "mac-address",
    "annotations",
    "ip-address",
    "plen",
    "v6-ip-address",
    "v6-plen",
    "gateway",
    "system-name",
];

pub(crate) fn json_key() -> BoxedStrategy<String> {
    prop_oneof![
        2 => select(KEYS).prop_map(String::from),
        1 => select(contrail_keys()).prop_map(String::from),
        1 => tricky_string(),
    ]
    .boxed()
}

/// Any JSON value, a few levels deep.
pub(crate) fn json_value() -> BoxedStrategy<Value> {
    json_leaf()
        .prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..6).prop_map(Value::Array),
                vec((json_key(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
        .boxed()
}

/// A value of a random JSON type for one field: mostly scalars, sometimes a whole tree.
pub(crate) fn any_field() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => tricky_string().prop_map(Value::String),
        3 => json_number(),
        1 => prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::Bool)],
        1 => json_value(),
    ]
    .boxed()
}

pub(crate) fn object(pairs: Vec<(String, Value)>) -> Value {
    Value::Object(pairs.into_iter().collect::<Map<String, Value>>())
}

/// A valid libcni name (container id, network, pod, namespace, cluster).
pub(crate) fn name() -> BoxedStrategy<String> {
    prop_oneof![
        4 => "[a-zA-Z0-9][a-zA-Z0-9_.-]{0,20}",
        1 => "[a-z0-9]{253}",
    ]
    .boxed()
}

/// Something that should not be accepted as a name (or that sits just at the limit).
pub(crate) fn hostile_name() -> BoxedStrategy<String> {
    prop_oneof![
        tricky_string(),
        "[a-z0-9]{254}",
        "[._-][a-z0-9]{0,5}",
        "[a-z]{1,4}[/\\\\ \\x00:;=é\u{a0}][a-z]{0,4}",
    ]
    .boxed()
}

pub(crate) fn uuid() -> BoxedStrategy<String> {
    any::<u128>().prop_map(uuid_of).boxed()
}

pub(crate) fn hostile_uuid() -> BoxedStrategy<String> {
    prop_oneof![
        uuid().prop_map(|u| u.to_uppercase()),
        uuid().prop_map(|u| u[1..].to_string()),
        uuid().prop_map(|u| format!("{u}0")),
        uuid().prop_map(|u| u.replace('-', "/")),
        uuid().prop_map(|u| format!("../../../../{}", &u[12..])),
        // 36 bytes, but not 36 ASCII characters.
        uuid().prop_map(|u| format!("é{}", &u[2..])),
        Just("../../../../../../../../../../etc/x".to_string()),
        tricky_string(),
    ]
    .boxed()
}

/// The `contrail` section's keys, as the table has them, and one it does not know.
pub(crate) fn contrail_keys() -> Vec<&'static str> {
    let mut keys: Vec<&str> = config::KEYS.iter().map(|k| k.name).collect();
    keys.push("unknown-key");
    keys
}

pub(crate) fn abs_path() -> BoxedStrategy<String> {
    vec("[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,8}", 0..4)
        .prop_map(|parts| format!("/{}", parts.join("/")))
        .boxed()
}

pub(crate) fn ifname_value() -> BoxedStrategy<String> {
    prop_oneof![
        4 => "[a-z][a-z0-9]{0,14}",
        1 => "[a-z0-9]{16,18}",
        2 => tricky_string(),
        1 => "[a-z]{0,3}[/: \\t\\n\\x0b\\x0c\\r\\x00\u{85}\u{a0}\u{2000}\u{3000}éàŠ.][a-z]{0,3}",
    ]
    .boxed()
}

/// The pod's VM: the agent's answers are for it, the resolver's VMIs are its.
pub(crate) const VM_UUID: &str = "40936d96-cf0e-11e8-9892-002590aaa964";
