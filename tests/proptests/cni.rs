//! What the runtime passes: `pod::from_args` over hostile and Multus-shaped `CNI_ARGS`, and
//! `cni::Env::parse` over the `CNI_*` environment.

use std::collections::HashMap;

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;

use contrail_k8s_cni::cni::pod::{self, Pod};
use contrail_k8s_cni::cni::{Command, Env, EnvProblem, check_ifname, valid_name};
use contrail_k8s_cni::error::{Error, code};

use crate::config;
use crate::strategies::{abs_path, hostile_name, ifname_value, name, tricky_string};

// ---------------------------------------------------------------------------------------------
// pod::from_args

/// An independent reading of CNI_ARGS: pairs split at `;`, key up to the first `=`, the last
/// non-empty value wins.
fn model_lookup(args: &str, key: &str) -> Option<String> {
    let mut found = None;
    for pair in args.split(';') {
        if let Some(eq) = pair.find('=') {
            let (k, v) = (&pair[..eq], &pair[eq + 1..]);
            if k == key && !v.is_empty() {
                found = Some(v.to_string());
            }
        }
    }
    found
}

const POD_KEYS: &[&str] = &[
    "K8S_POD_NAME",
    "K8S_POD_NAMESPACE",
    "K8S_POD_UID",
    "K8S_POD_INFRA_CONTAINER_ID",
    "IgnoreUnknown",
    "k8s_pod_name",
    "K8S_POD_NAME ",
    " K8S_POD_NAME",
    "",
];

fn args_value() -> BoxedStrategy<String> {
    prop_oneof![
        3 => name(),
        3 => hostile_name(),
        1 => Just(String::new()),
        1 => "[a-z]{0,3}[=;/\\x00][a-z=]{0,3}",
    ]
    .boxed()
}

/// CNI_ARGS-shaped strings whose values may hold anything (`;` and `=` included).
fn hostile_args() -> BoxedStrategy<String> {
    let pair = prop_oneof![
        3 => args_value().prop_map(|v| format!("K8S_POD_NAME={v}")),
        2 => (select(POD_KEYS), args_value()).prop_map(|(k, v)| format!("{k}={v}")),
        1 => tricky_string(),
    ];
    prop_oneof![
        6 => vec(pair, 1..8).prop_map(|p| p.join(";")),
        1 => any::<String>(),
        1 => "[K8S_POD_NAME=;/.\\x00é]{0,40}",
    ]
    .boxed()
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn pod_args_never_panic_and_names_are_path_safe(args in hostile_args()) {
        let got = pod::from_args(&args);
        let name = model_lookup(&args, "K8S_POD_NAME");
        let namespace = model_lookup(&args, "K8S_POD_NAMESPACE").unwrap_or_else(|| "default".into());
        match got {
            Ok(None) => prop_assert_eq!(name, None),
            Ok(Some(p)) => {
                for v in [&p.name, &p.namespace] {
                    prop_assert!(valid_name(v), "{v:?}");
                    prop_assert!(!v.contains('/') && v != "." && v != "..", "{v:?}");
                }
                prop_assert_eq!(Some(&p.name), name.as_ref());
                prop_assert_eq!(&p.namespace, &namespace);
            }
            Err(e) => {
                prop_assert_eq!(e.var.as_str(), "CNI_ARGS");
                prop_assert!(matches!(&e.problem, EnvProblem::BadName { key: Some(_), .. }), "{}", e);
                let name = name.unwrap_or_default();
                prop_assert!(!valid_name(&name) || !valid_name(&namespace), "refused {name:?} in {namespace:?}: {e}");
            }
        }
    }
}

/// One `K=V` of a Multus CNI_ARGS string.
#[derive(Debug, Clone)]
enum ArgPair {
    Name(String),
    Namespace(String),
    Uid(String),
    Extra(String, String),
    Bare(String),
}

fn arg_pair() -> BoxedStrategy<ArgPair> {
    let value_or_empty = || prop_oneof![4 => name(), 1 => Just(String::new())];
    prop_oneof![
        2 => value_or_empty().prop_map(ArgPair::Name),
        2 => value_or_empty().prop_map(ArgPair::Namespace),
        1 => prop_oneof![3 => "[a-f0-9-]{1,36}", 1 => Just(String::new())].prop_map(ArgPair::Uid),
        3 => ("[A-Za-z_][A-Za-z0-9_]{0,20}", "[^;]{0,12}")
            .prop_filter("not a pod key", |(k, _)| {
                !["K8S_POD_NAME", "K8S_POD_NAMESPACE", "K8S_POD_UID"].contains(&k.as_str())
            })
            .prop_map(|(k, v)| ArgPair::Extra(k, v)),
        1 => "[^;=]{0,8}".prop_map(ArgPair::Bare),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(config(512))]

    /// Multus prepends its own keys to the runtime's: keys repeat, the last non-empty wins.
    #[test]
    fn pod_multus_args_last_non_empty_value_wins(
        multus in vec(arg_pair(), 0..8),
        runtime in vec(arg_pair(), 0..8),
        last_name in name(),
    ) {
        let mut pairs = multus;
        pairs.extend(runtime);
        // At least one non-empty name, somewhere.
        let at = pairs.len() / 2;
        pairs.insert(at, ArgPair::Name(last_name));
        let (mut name, mut namespace) = (None, None);
        let mut text = Vec::new();
        for p in &pairs {
            match p {
                ArgPair::Name(v) => {
                    text.push(format!("K8S_POD_NAME={v}"));
                    if !v.is_empty() { name = Some(v.clone()); }
                }
                ArgPair::Namespace(v) => {
                    text.push(format!("K8S_POD_NAMESPACE={v}"));
                    if !v.is_empty() { namespace = Some(v.clone()); }
                }
                // Not needed, and not kept: the agent gives the pod's uuid.
                ArgPair::Uid(v) => text.push(format!("K8S_POD_UID={v}")),
                ArgPair::Extra(k, v) => text.push(format!("{k}={v}")),
                ArgPair::Bare(s) => text.push(s.clone()),
            }
        }
        let args = text.join(";");
        let want = Pod {
            namespace: namespace.unwrap_or_else(|| "default".into()),
            name: name.unwrap(),
        };
        prop_assert_eq!(pod::from_args(&args).ok(), Some(Some(want)), "{}", args);
    }
}

// ---------------------------------------------------------------------------------------------
// cni::Env::parse

fn command_value() -> BoxedStrategy<String> {
    prop_oneof![
        6 => select(&["ADD", "DEL", "CHECK", "VERSION", "GC", "STATUS"][..]).prop_map(String::from),
        1 => select(&["add", "", " ADD", "ADD\0", "DELETE"][..]).prop_map(String::from),
        1 => tricky_string(),
    ]
    .boxed()
}

fn netns_value() -> BoxedStrategy<String> {
    prop_oneof![
        4 => abs_path(),
        1 => Just("/proc/1234/ns/net".to_string()),
        1 => Just(String::new()),
        2 => tricky_string(),
    ]
    .boxed()
}

fn env_map() -> BoxedStrategy<HashMap<String, String>> {
    let var = |name: &'static str, s: BoxedStrategy<String>| {
        option::weighted(0.9, s).prop_map(move |v| v.map(|v| (name.to_string(), v)))
    };
    (
        var("CNI_COMMAND", command_value()),
        var(
            "CNI_CONTAINERID",
            prop_oneof![3 => name(), 1 => hostile_name()].boxed(),
        ),
        var("CNI_NETNS", netns_value()),
        var("CNI_IFNAME", ifname_value()),
        var("CNI_ARGS", hostile_args()),
        var("CNI_PATH", abs_path()),
    )
        .prop_map(|(a, b, c, d, e, f)| [a, b, c, d, e, f].into_iter().flatten().collect())
        .boxed()
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn env_never_panics_and_accepts_only_safe_values(vars in env_map()) {
        match Env::parse(|k| vars.get(k).cloned()) {
            Err(e) => prop_assert_eq!(Error::from(e).code(), code::INVALID_ENV),
            Ok(env) => {
                prop_assert_eq!(Some(env.command.as_str()), vars.get("CNI_COMMAND").map(String::as_str));
                prop_assert!(env.sandbox.as_ref().is_none_or(|c| valid_name(c.as_str())), "{:?}", env.sandbox);
                prop_assert!(env.interface.as_ref().is_none_or(|i| check_ifname(i.as_str()).is_ok()), "{:?}", env.interface);
                prop_assert!(env.netns.is_empty() || env.netns.starts_with('/'), "{:?}", env.netns);
                prop_assert!(!env.netns.contains('\0'));
                if matches!(env.command, Command::Add | Command::Del | Command::Check) {
                    prop_assert!(env.container_id().is_ok_and(|c| valid_name(c.as_str())));
                    prop_assert!(env.ifname().is_ok_and(|i| check_ifname(i.as_str()).is_ok()));
                    prop_assert_eq!(&env.args, vars.get("CNI_ARGS").map_or("", String::as_str));
                }
                if matches!(env.command, Command::Add | Command::Check) {
                    prop_assert!(!env.netns.is_empty());
                }
            }
        }
    }
}
