//! Pod identity from CNI_ARGS, as Multus, CNI-Genie and podman send it.

use crate::cni::{BadEnv, EnvProblem, valid_name};
use crate::ids::VmName;

/// The pod an invocation is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
}

impl Pod {
    /// The agent's VM name, `<cluster-name>__<namespace>__<pod>`: a directory name in the
    /// state directory, so checked as one before anything uses it.
    pub fn vm_name(&self, cluster: &str) -> Result<VmName, BadEnv> {
        let name = format!("{cluster}__{}__{}", self.namespace, self.name);
        VmName::parse(name.as_str()).map_err(|_| {
            BadEnv::new(
                "CNI_ARGS",
                EnvProblem::BadName {
                    key: Some("K8S_POD_NAMESPACE and K8S_POD_NAME"),
                    value: name,
                },
            )
        })
    }
}

/// `K=V;K=V` pairs. Multus prepends its own keys to the caller's, so keys repeat: the last
/// non-empty value wins, as later assignments win in libcni's own parser; empty values
/// (`K8S_POD_UID=`) count as absent. Pairs without `=` are ignored, like unknown keys.
fn lookup<'a>(args: &'a str, key: &str) -> Option<&'a str> {
    args.rsplit(';')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, v)| *k == key && !v.is_empty())
        .map(|(_, v)| v)
}

/// The pod from CNI_ARGS. `K8S_POD_NAMESPACE` defaults to `default` because podman sends only
/// `K8S_POD_NAME`; `None` when there is no pod name at all.
pub fn from_args(args: &str) -> Result<Option<Pod>, BadEnv> {
    let Some(name) = lookup(args, "K8S_POD_NAME") else {
        return Ok(None);
    };
    let namespace = lookup(args, "K8S_POD_NAMESPACE").unwrap_or("default");
    for (key, value) in [("K8S_POD_NAME", name), ("K8S_POD_NAMESPACE", namespace)] {
        // These become a directory name under config-dir: never a path.
        if !valid_name(value) {
            return Err(BadEnv::new(
                "CNI_ARGS",
                EnvProblem::BadName {
                    key: Some(key),
                    value: value.to_string(),
                },
            ));
        }
    }
    Ok(Some(Pod {
        namespace: namespace.to_string(),
        name: name.to_string(),
    }))
}

/// The pod's UID (`K8S_POD_UID`), which names a vhost-user attachment's directory: `None` when
/// the runtime sent none; one that is not a UUID is refused (it becomes a directory name).
pub fn uid_from_args(args: &str) -> Result<Option<crate::ids::PodUid>, BadEnv> {
    lookup(args, "K8S_POD_UID")
        .map(|u| {
            crate::ids::PodUid::parse(u).map_err(|_| {
                BadEnv::new(
                    "CNI_ARGS",
                    EnvProblem::BadName {
                        key: Some("K8S_POD_UID"),
                        value: u.to_string(),
                    },
                )
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::code;

    #[test]
    fn multus_args_with_repeated_keys() {
        let args = "IgnoreUnknown=true;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-0;\
                    K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1;IgnoreUnknown=1;\
                    K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1";
        let pod = from_args(args).unwrap().unwrap();
        assert_eq!(
            pod,
            Pod {
                namespace: "ns1".into(),
                name: "web-0".into(),
            }
        );
        assert_eq!(pod.vm_name("k8s").unwrap().as_str(), "k8s__ns1__web-0");
    }

    #[test]
    fn empty_values_count_as_absent() {
        let pod = from_args("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=;K8S_POD_NAME=")
            .unwrap()
            .unwrap();
        assert_eq!(pod.name, "p");
    }

    #[test]
    fn cni_genie_sends_no_uid() {
        let pod = from_args("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=g")
            .unwrap()
            .unwrap();
        assert_eq!(pod.vm_name("k8s").unwrap().as_str(), "k8s__default__g");
    }

    #[test]
    fn podman_sends_only_a_name() {
        let pod = from_args("IgnoreUnknown=1;K8S_POD_NAME=my_ctr")
            .unwrap()
            .unwrap();
        assert_eq!(pod.vm_name("k8s").unwrap().as_str(), "k8s__default__my_ctr");
    }

    #[test]
    fn no_pod_name_is_none() {
        assert_eq!(from_args("").unwrap(), None);
        assert_eq!(from_args("IgnoreUnknown=1;garbage;=x").unwrap(), None);
    }

    #[test]
    fn path_like_names_are_refused_with_code_4() {
        for args in [
            "K8S_POD_NAME=../x",
            "K8S_POD_NAME=a/b",
            "K8S_POD_NAME=p;K8S_POD_NAMESPACE=..",
            "K8S_POD_NAME=.x",
        ] {
            let err = from_args(args).unwrap_err();
            assert_eq!(err.var, "CNI_ARGS", "{args}");
            assert!(
                matches!(&err.problem, EnvProblem::BadName { key: Some(_), .. }),
                "{args}: {err:?}"
            );
            assert_eq!(crate::error::Error::from(err).code(), code::INVALID_ENV);
        }
    }

    #[test]
    fn the_pod_uid_is_a_uuid_or_absent() {
        let u = "7f1a2b3c-0000-4000-8000-000000000001";
        let got = uid_from_args(&format!("K8S_POD_NAME=p;K8S_POD_UID={u}")).unwrap();
        assert_eq!(got.unwrap().as_str(), u);
        assert!(
            uid_from_args("K8S_POD_NAME=p;K8S_POD_UID=")
                .unwrap()
                .is_none()
        );
        assert!(uid_from_args("K8S_POD_NAME=p").unwrap().is_none());
        for bad in ["../../etc", "x", "7f1a2b3c-0000-4000-8000-00000000000/"] {
            let err = uid_from_args(&format!("K8S_POD_UID={bad}")).unwrap_err();
            assert_eq!(
                crate::error::Error::from(err).code(),
                code::INVALID_ENV,
                "{bad}"
            );
        }
    }
}
