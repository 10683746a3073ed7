//! The two containerds the CRI tests run, and what differs between them: where their programs
//! and the reference plugins they can speak to come from, and their config's form.
//!
//! - **1.6** (Debian's `containerd` package): config version 2, the CRI plugin is
//!   `io.containerd.grpc.v1.cri`; go-cni with libcni 1.1, which reads a conflist's `cniVersion`
//!   only (the shipped one: 1.0.0) and knows neither STATUS nor GC. Debian's reference plugins
//!   (1.1.1) speak up to 1.0.0.
//! - **2.2.7** (`../shared/peers`: `containerd`, `ctr`, `containerd-shim-runc-v2`): config
//!   version 3, the CRI plugin split into `io.containerd.cri.v1.runtime` (with `cni`) and
//!   `io.containerd.cri.v1.images`; go-cni 1.1.13 with libcni 1.3, which takes the highest of a
//!   conflist's `cniVersions` it supports (the shipped one: 1.1.0) and sends STATUS on each CRI
//!   `Status`. It needs the reference plugins 1.9.1 of the peers, which speak 1.1.0.

use std::path::{Path, PathBuf};

use contrail_testkit::peer_bin;

use crate::containerd::{BROKEN_RUNTIME, IMAGE, PACKAGES};
use crate::host::{toml, which};

/// Which containerd a test runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// Debian's containerd 1.6.
    V1_6,
    /// containerd 2.2.7 of `../shared/peers`.
    V2_2,
}

/// Where containerd keeps a test's things (all in the test's temp dir).
pub struct Paths<'a> {
    pub root: &'a Path,
    pub state: &'a Path,
    pub socket: &'a Path,
    pub ttrpc: &'a Path,
    pub opt: &'a Path,
    pub cni_bin: &'a Path,
    pub cni_conf: &'a Path,
    /// A file whose CNI settings containerd imports instead (2.2.7: `examples/containerd/`).
    pub cni_import: Option<&'a Path>,
}

impl Version {
    /// A program of this containerd (`containerd`, `ctr`, `containerd-shim-runc-v2`).
    pub fn bin(self, name: &str) -> PathBuf {
        match self {
            Version::V1_6 => which(name).unwrap_or_else(|| {
                panic!("{name} is missing: install {PACKAGES} (scripts/test does)")
            }),
            Version::V2_2 => peer_bin(name),
        }
    }

    /// A reference plugin (`tuning`, `loopback`) that speaks the CNI version this containerd's
    /// libcni picks for the shipped conflist.
    pub fn reference_plugin(self, kind: &str) -> PathBuf {
        match self {
            Version::V1_6 => {
                let p = Path::new("/usr/lib/cni").join(kind);
                assert!(
                    p.exists(),
                    "{} is missing: install {PACKAGES} (scripts/test does)",
                    p.display()
                );
                p
            }
            Version::V2_2 => peer_bin(&format!("cni-{kind}")),
        }
    }

    /// The CNI version libcni sends with the shipped conflist (`cniVersion` 1.0.0, `cniVersions`
    /// 1.0.0 and 1.1.0).
    pub fn cni_version(self) -> &'static str {
        match self {
            Version::V1_6 => "1.0.0",
            Version::V2_2 => "1.1.0",
        }
    }

    /// Whether its CRI `Status` asks the network's plugins for their STATUS (libcni 1.3, with
    /// a network config at 1.1.0).
    pub fn asks_status(self) -> bool {
        self == Version::V2_2
    }

    /// containerd's `PATH`, where it looks its shim up: the usual directories (Debian's shim, of
    /// 1.6, is there), after `shim_dir` with the peer's shim linked into it (2.2.7).
    pub fn search_path(self, shim_dir: &Path) -> String {
        let usual = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        let shim = "containerd-shim-runc-v2";
        let bin = self.bin(shim);
        match self {
            Version::V1_6 => usual.into(),
            Version::V2_2 => {
                std::fs::create_dir_all(shim_dir).unwrap();
                std::os::unix::fs::symlink(bin, shim_dir.join(shim)).unwrap();
                format!("{}:{usual}", shim_dir.display())
            }
        }
    }

    /// containerd's config, in this version's form: everything it keeps under `paths`, the
    /// sandbox image the test imports, the `native` snapshotter, OOM score adjustments kept
    /// within containerd's own, the runtime handlers `runc` and [`BROKEN_RUNTIME`], the CNI
    /// directories with one network (the first config by name).
    pub fn config(self, paths: &Paths) -> String {
        let p = |path: &Path| toml(path.to_str().unwrap());
        let common = format!(
            "root = {}\nstate = {}\n[grpc]\n  address = {}\n[ttrpc]\n  address = {}\n\
             [plugins.\"io.containerd.internal.v1.opt\"]\n  path = {}\n",
            p(paths.root),
            p(paths.state),
            p(paths.socket),
            p(paths.ttrpc),
            p(paths.opt)
        );
        let cni = |bin_key: &str, table: &str| {
            format!(
                "[{table}.cni]\n  {bin_key}\n  conf_dir = {}\n  max_conf_num = 1\n",
                p(paths.cni_conf)
            )
        };
        let image = toml(IMAGE);
        match self {
            Version::V1_6 => {
                assert!(
                    paths.cni_import.is_none(),
                    "containerd 1.6 imports no CNI settings"
                );
                let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
                format!(
                    "version = 2\n{common}\
                     [{cri}]\n  sandbox_image = {image}\n  restrict_oom_score_adj = true\n\
                     {}{}",
                    runtimes(cri, "snapshotter = \"native\""),
                    cni(&format!("bin_dir = {}", p(paths.cni_bin)), cri),
                )
            }
            Version::V2_2 => {
                let runtime = "plugins.\"io.containerd.cri.v1.runtime\"";
                let images = "plugins.\"io.containerd.cri.v1.images\"";
                let transfer = "plugins.\"io.containerd.transfer.v1.local\"";
                // No drop-ins of the machine's /etc/containerd/conf.d; NRI off (it would make
                // /var/run/nri/nri.sock). `ctr images import` goes through the transfer
                // service, which unpacks only for the platforms and snapshotters of its
                // `unpack_config` (by default overlayfs).
                let (imports, cni) = match paths.cni_import {
                    Some(file) => (p(file), String::new()),
                    None => (
                        String::new(),
                        cni(&format!("bin_dirs = [{}]", p(paths.cni_bin)), runtime),
                    ),
                };
                format!(
                    "version = 3\nimports = [{imports}]\n\
                     disabled_plugins = [\"io.containerd.nri.v1.nri\"]\n\
                     {common}\
                     [{transfer}]\n  unpack_config = \
                     [{{platform = \"linux/amd64\", snapshotter = \"native\"}}]\n\
                     [{images}]\n  snapshotter = \"native\"\n\
                     [{images}.pinned_images]\n  sandbox = {image}\n\
                     [{runtime}]\n  restrict_oom_score_adj = true\n{}{cni}",
                    runtimes(runtime, ""),
                )
            }
        }
    }
}

/// The runtime handlers of the CRI plugin's `table`: `runc` (the default) and
/// [`BROKEN_RUNTIME`], whose runc is `/bin/false`; `extra` is another line of
/// `{table}.containerd`.
fn runtimes(table: &str, extra: &str) -> String {
    let t = format!("{table}.containerd");
    format!(
        "[{t}]\n  default_runtime_name = \"runc\"\n  {extra}\n\
         [{t}.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n\
         [{t}.runtimes.{BROKEN_RUNTIME}]\n  runtime_type = \"io.containerd.runc.v2\"\n\
         [{t}.runtimes.{BROKEN_RUNTIME}.options]\n  BinaryName = \"/bin/false\"\n"
    )
}
