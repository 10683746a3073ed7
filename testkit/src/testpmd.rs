//! DPDK's testpmd for the vhost-user rig: the application in a pod and vrouter-dpdk's side.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bins::{tag, try_sh, wait_for};
use crate::netns::enter_node;

/// Where the application side of a [`Testpmd`] sees its pod's directory (its own mount
/// namespace binds the pod's directory there).
pub const APP_SOCKET_DIR: &str = "/mnt/vhost";

/// A DPDK `dpdk-testpmd` (Debian's `dpdk-dev`) for the vhost-user rig: without hugepages
/// (`--no-huge`, memfd-backed: the vRouter's 8 memory regions are enough), its DPDK runtime
/// directory on a tmpfs of its own mount namespace (nothing left in `/run/dpdk`), its two
/// lcores floating over the machine's CPUs. It forwards until stopped; [`Testpmd::stop`] sends
/// SIGINT, on which testpmd prints its forward statistics and exits.
pub struct Testpmd {
    child: Child,
    output: Arc<std::sync::Mutex<String>>,
}

impl Testpmd {
    /// The application in a pod: a virtio-user port in server mode (it creates and listens on
    /// `<pod_dir>/<socket>`), sending (`txonly`). It runs in a mount namespace of its own that
    /// sees the pod's directory at [`APP_SOCKET_DIR`] and an empty tmpfs over each of `hide`
    /// (the vRouter's socket directory, other pods' directories: a pod never sees them).
    pub fn app(pod_dir: &Path, socket: &str, hide: &[&Path]) -> Testpmd {
        let mut mounts = format!(
            "mount -t tmpfs tmpfs /mnt && mkdir {APP_SOCKET_DIR} && mount --bind '{}' {APP_SOCKET_DIR}",
            pod_dir.display()
        );
        for dir in hide {
            mounts += &format!(" && mount -t tmpfs tmpfs '{}'", dir.display());
        }
        let vdev = format!("net_virtio_user0,path={APP_SOCKET_DIR}/{socket},server=1");
        Testpmd::spawn(&mounts, &vdev, "txonly")
    }

    /// vrouter-dpdk's side: a vhost port in client mode that connects to `path` (a
    /// `uvh_vif_<name>`, possibly a symlink), receiving (`rxonly`) and printing its statistics
    /// every second.
    pub fn vrouter(path: &Path) -> Testpmd {
        let vdev = format!("net_vhost0,iface={},client=1", path.display());
        Testpmd::spawn("true", &vdev, "rxonly")
    }

    fn spawn(mounts: &str, vdev: &str, mode: &str) -> Testpmd {
        enter_node();
        let prefix = format!("ck8s-{}", tag());
        let script = format!(
            "mkdir -p /run/dpdk && mount -t tmpfs tmpfs /run/dpdk && {mounts} && exec dpdk-testpmd \
             --lcores '0@(0,1),1@(0,1)' --no-huge -m 256 --no-pci --file-prefix {prefix} \
             --vdev '{vdev}' -- --forward-mode={mode} --nb-cores=1 --total-num-mbufs=2048 \
             --stats-period 1"
        );
        let mut child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare and dpdk-testpmd (Debian's dpdk-dev: scripts/test installs it)");
        let output = Arc::new(std::sync::Mutex::new(String::new()));
        let pipes: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for pipe in pipes {
            let output = Arc::clone(&output);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut out = output.lock().unwrap();
                    out.push_str(&line);
                    out.push('\n');
                }
            });
        }
        Testpmd { child, output }
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// The packets received so far, by its last periodic statistics.
    pub fn rx_so_far(&self) -> u64 {
        rx_packets(&self.output())
    }

    /// Stops it (SIGINT: it prints its forward statistics) and waits, at most `bound`, for it
    /// to exit; everything it printed.
    pub fn stop(mut self, bound: Duration) -> String {
        let pid = self.child.id().to_string();
        let _ = try_sh("kill", &["-INT", &pid]);
        let start = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < bound,
                "testpmd did not exit within {bound:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The readers finish with the pipes.
        wait_for("testpmd's output", bound, || {
            Arc::strong_count(&self.output) == 1
        });
        self.output()
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `RX-packets: N` testpmd printed (its periodic statistics, or at exit its forward
/// statistics); 0 before any.
pub fn rx_packets(output: &str) -> u64 {
    last_count(output, "RX-packets:")
}

/// The last `TX-packets: N` testpmd printed; 0 before any.
pub fn tx_packets(output: &str) -> u64 {
    last_count(output, "TX-packets:")
}

fn last_count(output: &str, label: &str) -> u64 {
    output
        .lines()
        .filter_map(|l| l.trim().strip_prefix(label))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .next_back()
        .unwrap_or(0)
}
