//! The part of Kubernetes' protobuf encoding the meta-plugins' writes need: client-go sends a
//! `PUT pods/<name>/status` (Multus's network-status annotation) and a `POST events` as
//! `application/vnd.kubernetes.protobuf`, the magic `k8s\0` then a `runtime.Unknown` whose `raw`
//! is the `v1.Pod` or `v1.Event`. Only the fields the stand-in keeps are declared (k8s.io/api
//! `core/v1/generated.proto`, k8s.io/apimachinery `runtime/generated.proto`,
//! `apis/meta/v1/generated.proto`); prost skips the others.

use std::collections::BTreeMap;

use prost::Message;

const MAGIC: &[u8] = b"k8s\0";

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", tag = "2")]
    raw: Vec<u8>,
    #[prost(string, tag = "3")]
    content_encoding: String,
    #[prost(string, tag = "4")]
    content_type: String,
}

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, tag = "1")]
    api_version: String,
    #[prost(string, tag = "2")]
    kind: String,
}

#[derive(Clone, PartialEq, Message)]
struct Pod {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
}

#[derive(Clone, PartialEq, Message)]
struct Event {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(string, tag = "3")]
    reason: String,
    #[prost(string, tag = "4")]
    message: String,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "3")]
    namespace: String,
    #[prost(string, tag = "5")]
    uid: String,
    #[prost(string, tag = "6")]
    resource_version: String,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
}

/// What a pod's update says of the pod's metadata, from either encoding.
pub(crate) struct PodMeta {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) resource_version: String,
    pub(crate) annotations: BTreeMap<String, String>,
}

/// The `raw` of a v1 object of `kind` in Kubernetes' protobuf envelope.
fn unwrap(body: &[u8], kind: &str) -> Result<Vec<u8>, String> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or("no k8s protobuf magic at the start of the body")?;
    let unknown = Unknown::decode(rest).map_err(|e| format!("runtime.Unknown: {e}"))?;
    if let Some(t) = &unknown.type_meta
        && (t.kind != kind || t.api_version != "v1")
    {
        return Err(format!(
            "a {}/{} where a v1/{kind} goes",
            t.api_version, t.kind
        ));
    }
    if !unknown.content_encoding.is_empty() {
        return Err(format!("content encoding {:?}", unknown.content_encoding));
    }
    Ok(unknown.raw)
}

/// A `v1.Pod` in Kubernetes' protobuf envelope.
pub(crate) fn decode_pod(body: &[u8]) -> Result<PodMeta, String> {
    let raw = unwrap(body, "Pod")?;
    let pod = Pod::decode(raw.as_slice()).map_err(|e| format!("v1.Pod: {e}"))?;
    let m = pod.metadata.unwrap_or_default();
    Ok(PodMeta {
        name: m.name,
        namespace: m.namespace,
        resource_version: m.resource_version,
        annotations: m.annotations,
    })
}

/// A `v1.Event` in Kubernetes' protobuf envelope, as JSON: what a test looks at of it (its
/// name, reason and message).
pub(crate) fn decode_event(body: &[u8]) -> Result<serde_json::Value, String> {
    let raw = unwrap(body, "Event")?;
    let event = Event::decode(raw.as_slice()).map_err(|e| format!("v1.Event: {e}"))?;
    let m = event.metadata.unwrap_or_default();
    Ok(serde_json::json!({
        "metadata": {"name": m.name, "namespace": m.namespace},
        "reason": event.reason, "message": event.message,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_in_its_envelope_reads_back() {
        let meta = ObjectMeta {
            name: "web-0".into(),
            namespace: "default".into(),
            uid: "u".into(),
            resource_version: "7".into(),
            annotations: BTreeMap::from([(
                "k8s.v1.cni.cncf.io/network-status".into(),
                "[]".into(),
            )]),
        };
        let raw = Pod {
            metadata: Some(meta),
        }
        .encode_to_vec();
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: "v1".into(),
                kind: "Pod".into(),
            }),
            raw,
            content_encoding: String::new(),
            content_type: String::new(),
        };
        let mut body = MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        let pod = decode_pod(&body).unwrap();
        assert_eq!(
            (pod.name.as_str(), pod.resource_version.as_str()),
            ("web-0", "7")
        );
        assert_eq!(pod.annotations["k8s.v1.cni.cncf.io/network-status"], "[]");
        assert!(decode_pod(b"{}").is_err());
        assert!(
            decode_event(&body)
                .unwrap_err()
                .contains("v1/Pod where a v1/Event goes")
        );
    }
}
