//! A container image made by the test: an OCI image layout directory (`oci-layout`,
//! `index.json`, `blobs/sha256/`), one uncompressed layer, for runtimes that need an image on a
//! node that cannot download one (CRI-O's pause image, copied into its storage with skopeo).

use std::path::Path;

use serde_json::{Value, json};

use crate::bins::sh;
use crate::files::TempDir;

/// Writes an image into `dir` as an OCI layout: one layer holding each `(machine file, path in
/// the image)` of `files`, mode kept, owned by root; `entrypoint` as its config's; `tag` as the
/// manifest's `org.opencontainers.image.ref.name` (what `oci:<dir>:<tag>` names).
pub fn oci_layout(dir: &Path, files: &[(&str, &str)], entrypoint: &[&str], tag: &str) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    // The layer's tree and its tar, beside each other.
    let work = TempDir::new();
    let (root, layer) = (work.0.join("root"), work.0.join("layer.tar"));
    for (from, to) in files {
        let to = root.join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, &to).unwrap_or_else(|e| panic!("{from}: {e}"));
    }
    sh(
        "tar",
        &[
            "-C",
            root.to_str().unwrap(),
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-cf",
            layer.to_str().unwrap(),
            ".",
        ],
    );
    // A blob under its digest: its descriptor (mediaType, digest, size).
    let blob = |bytes: &[u8], media: &str| -> Value {
        let tmp = blobs.join(".new");
        std::fs::write(&tmp, bytes).unwrap();
        let sum = sh("sha256sum", &[tmp.to_str().unwrap()]);
        let hex = sum.split_whitespace().next().unwrap();
        std::fs::rename(&tmp, blobs.join(hex)).unwrap();
        json!({"mediaType": media, "digest": format!("sha256:{hex}"), "size": bytes.len()})
    };
    let layer_blob = blob(
        &std::fs::read(&layer).unwrap(),
        "application/vnd.oci.image.layer.v1.tar",
    );
    let config = json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint},
        "rootfs": {"type": "layers", "diff_ids": [layer_blob["digest"]]},
    });
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": blob(config.to_string().as_bytes(), "application/vnd.oci.image.config.v1+json"),
        "layers": [layer_blob],
    });
    let mut entry = blob(
        manifest.to_string().as_bytes(),
        "application/vnd.oci.image.manifest.v1+json",
    );
    entry["annotations"] = json!({"org.opencontainers.image.ref.name": tag});
    entry["platform"] = json!({"architecture": "amd64", "os": "linux"});
    let index = json!({"schemaVersion": 2, "manifests": [entry]});
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}
