//! The vhost-user rig with Debian's DPDK (`dpdk-dev`'s `dpdk-testpmd`): an application in a pod
//! (virtio-user, the vhost-user server: it creates the socket) and vrouter-dpdk's side (a vhost
//! port, the client), connected through a symlink `uvh_vif_<name>` in the vRouter's socket
//! directory into the pod's directory, as a plugin sets them up. The application runs in a
//! mount namespace of its own that sees only the pod's directory.

use std::os::unix::fs::{FileTypeExt, symlink};
use std::path::Path;
use std::time::Duration;

use contrail_testkit::*;

const BOUND: Duration = Duration::from_secs(60);

fn is_socket(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

#[test]
fn packets_cross_from_the_app_to_the_vrouter_through_a_symlinked_socket() {
    enter_node();
    let (pod_dir, vr_dir) = (TempDir::new(), TempDir::new());
    // The application cannot see the vRouter's socket directory: a tmpfs hides it.
    let app = Testpmd::app(&pod_dir.0, "sock", &[&vr_dir.0]);
    let sock = pod_dir.0.join("sock");
    wait_for("the application's socket", BOUND, || is_socket(&sock));
    let link = vr_dir.0.join("uvh_vif_vhost0a");
    symlink(&sock, &link).unwrap();
    let vrouter = Testpmd::vrouter(&link);
    wait_for("packets at the vRouter's side", BOUND, || {
        vrouter.rx_so_far() > 0
    });
    let vr_out = vrouter.stop(BOUND);
    let app_out = app.stop(BOUND);
    let (rx, tx) = (rx_packets(&vr_out), tx_packets(&app_out));
    assert!(
        vr_out.contains("virtio is now ready for processing"),
        "{vr_out}"
    );
    eprintln!("vRouter side received {rx}, the application sent {tx}");
    assert!(rx > 0 && rx <= tx, "rx {rx} tx {tx}\n{vr_out}\n{app_out}");
    // The vRouter's side never removes the socket's symlink.
    assert!(link.symlink_metadata().is_ok());
}

#[test]
fn the_simulators_vrouter_dpdk_stand_in_connects_to_a_real_virtio_user_app() {
    enter_node();
    let (pod_dir, vr_dir) = (TempDir::new(), TempDir::new());
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1)]);
    let sim = Sim::dpdk(&[&pod], &vr_dir.0);
    let sock = pod_dir.0.join("sock");
    symlink(&sock, vr_dir.0.join("uvh_vif_vhost0b")).unwrap();
    let vn = sim.get(&format!("/vm-cfg/{}", pod.vm_name()))[0]["vn-id"].clone();
    let body = serde_json::json!({"id": pod.vmis[0].uuid, "instance-id": pod.uuid, "vn-id": vn,
        "vm-project-id": "00000000-0000-0000-0000-000000000000", "display-name": pod.vm_name(),
        "ip-address": "0.0.0.0", "ip6-address": "", "system-name": "vhost0b",
        "mac-address": pod.vmis[0].mac, "type": 0, "rx-vlan-id": -1, "tx-vlan-id": -1,
        "vhostuser-mode": 1});
    let url = format!("http://{}:{}/port", sim.ip, sim.port);
    ureq::post(&url).send_json(&body).unwrap();
    let app = Testpmd::app(&pod_dir.0, "sock", &[&vr_dir.0]);
    // The application, the vhost-user master, speaks first once the stand-in connected.
    let standin = || sim.get("/sim/vhost")[0].clone();
    wait_for("the stand-in to connect", BOUND, || {
        standin()["bytes-received"].as_u64().unwrap() > 0
    });
    assert_eq!(standin()["connected"], true);
    app.stop(BOUND);
    wait_for("the stand-in to see the app go", BOUND, || {
        standin()["connected"] == false
    });
}
