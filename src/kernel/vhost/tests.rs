//! Unit tests of the vhost-user host side: the paths it derives, and what it creates and
//! removes in a pod's directory and the socket directory, on a real filesystem.

use super::*;

const UID: &str = "7f1a2b3c-0000-4000-8000-000000000001";

fn dirs(base: &Path) -> Dirs {
    Dirs {
        vrouter: base.join("vrouter"),
        root: base.join("vhost"),
        pod_mount: PathBuf::from("/var/run/vhost"),
        device_info: base.join("devinfo"),
    }
}

fn tempdir(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("ck8s-vhost-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&p);
    fs::create_dir_all(p.join("vrouter")).unwrap();
    p
}

#[test]
fn paths_follow_the_vrouters_fixed_name_and_the_pods_uid() {
    let d = Dirs {
        vrouter: "/var/run/vrouter".into(),
        root: "/var/run/contrail-k8s-cni/vhost".into(),
        pod_mount: "/var/run/vhost".into(),
        device_info: "/var/run/k8s.cni.cncf.io/devinfo/cni".into(),
    };
    let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
    assert_eq!(p.link, Path::new("/var/run/vrouter/uvh_vif_tap0123456789a"));
    assert_eq!(
        p.socket,
        Path::new("/var/run/contrail-k8s-cni/vhost")
            .join(UID)
            .join("net1.sock")
    );
    assert_eq!(p.pod_socket, Path::new("/var/run/vhost/net1.sock"));
    assert_eq!(p.info, p.pod_dir.join("net1.json"));
}

#[test]
fn a_path_over_107_bytes_is_refused_naming_its_key() {
    let long = |n: usize| PathBuf::from(format!("/{}", "d".repeat(n)));
    let ok = Dirs {
        vrouter: "/var/run/vrouter".into(),
        root: "/r".into(),
        pod_mount: "/p".into(),
        device_info: "/d".into(),
    };
    // /r/<36>/<15>.sock: 2 + 1 + 36 + 1 + 20 = 60 bytes; 107 exactly passes.
    let at_limit = Dirs {
        root: long(107 - 1 - 36 - 1 - "net1.sock".len() - 1),
        ..ok.clone()
    };
    assert_eq!(
        at_limit
            .checked_paths(UID, "tap0123456789a", "net1")
            .unwrap()
            .socket
            .as_os_str()
            .len(),
        107
    );
    for (d, key) in [
        (
            Dirs {
                root: long(80),
                ..ok.clone()
            },
            "vhost-dir",
        ),
        (
            Dirs {
                vrouter: long(90),
                ..ok.clone()
            },
            "vrouter-socket-dir",
        ),
        (
            Dirs {
                pod_mount: long(100),
                ..ok.clone()
            },
            "vhost-pod-dir",
        ),
    ] {
        let e = d.checked_paths(UID, "tap0123456789a", "net1").unwrap_err();
        assert!(e.to_string().contains(key), "{key}: {e}");
        assert_eq!(e.code(), 7, "{e}");
    }
}

#[test]
fn create_then_remove_with_a_retry_and_a_file_that_keeps_the_directory() {
    let base = tempdir("life");
    let d = dirs(&base);
    let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
    create(&d, &p).unwrap();
    assert_eq!(fs::read_link(&p.link).unwrap(), p.socket);
    // Again (a retried ADD): the leftover link is ours and replaced.
    create(&d, &p).unwrap();
    // Something that is not the application's socket keeps the directory.
    fs::write(&p.socket, b"").unwrap();
    fs::write(&p.info, b"{}").unwrap();
    remove(&d, &p, true).unwrap();
    assert!(fs::symlink_metadata(&p.link).is_err());
    assert!(!p.info.exists());
    assert!(p.socket.exists());
    fs::remove_file(&p.socket).unwrap();
    remove(&d, &p, true).unwrap();
    assert!(!p.pod_dir.exists());
    // Removing what is gone is done.
    remove(&d, &p, true).unwrap();
    fs::remove_dir_all(&base).unwrap();
}

#[test]
fn the_info_file_tells_the_application_where_and_who_it_is() {
    use crate::cni::{Interface, IpConfig, Outcome};
    let out = Outcome {
        interfaces: vec![Interface {
            name: "net1".into(),
            mac: "02:00:00:00:00:01".into(),
            mtu: 1500,
            sandbox: Some("/run/netns/x".into()),
            socket_path: Some("/var/run/vhost/net1.sock".into()),
        }],
        ips: vec![IpConfig {
            address: "10.0.0.5/24".parse().unwrap(),
            gateway: Some("10.0.0.1".parse().unwrap()),
            interface: 0,
        }],
        ..Outcome::default()
    };
    let i = info(&out, "b86ac068-cf0e-11e8-b196-002590000001");
    assert_eq!(i["socketPath"], "/var/run/vhost/net1.sock");
    assert_eq!(i["mode"], "server");
    assert_eq!(i["mac"], "02:00:00:00:00:01");
    assert_eq!(i["ips"][0]["address"], "10.0.0.5/24");
    assert_eq!(i["ips"][0]["gateway"], "10.0.0.1");
    let base = tempdir("info");
    let d = dirs(&base);
    let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
    create(&d, &p).unwrap();
    write_info(&d, &p, &i).unwrap();
    let back: serde_json::Value = serde_json::from_slice(&fs::read(&p.info).unwrap()).unwrap();
    assert_eq!(back, i);
    remove(&d, &p, true).unwrap();
    assert!(!p.pod_dir.exists());
    fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_link_that_is_not_ours_is_refused_and_kept() {
    let base = tempdir("foreign");
    let d = dirs(&base);
    let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
    symlink("/elsewhere/sock", &p.link).unwrap();
    assert!(create(&d, &p).is_err());
    remove(&d, &p, true).unwrap();
    assert_eq!(
        fs::read_link(&p.link).unwrap(),
        Path::new("/elsewhere/sock")
    );
    fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_device_info_file_is_taken_only_under_the_name_multus_gives_this_attachment() {
    let d = dirs(Path::new("/n"));
    let cid = "3f2a9c1e7d40";
    let ok = serde_json::json!(format!("/n/devinfo/dpdk-net-{cid}_net1"));
    assert_eq!(
        d.device_info_file(Some(&ok), "dpdk-net", cid, "net1")
            .unwrap(),
        Some(PathBuf::from(format!("/n/devinfo/dpdk-net-{cid}_net1")))
    );
    assert_eq!(
        d.device_info_file(None, "dpdk-net", cid, "net1").unwrap(),
        None
    );
    for bad in [
        // Another attachment's: another sandbox, interface or network.
        serde_json::json!("/n/devinfo/dpdk-net-0123456789ab_net1"),
        serde_json::json!(format!("/n/devinfo/dpdk-net-{cid}_net2")),
        serde_json::json!(format!("/n/devinfo/other-{cid}_net1")),
        serde_json::json!("/etc/cron.d/x"),
        serde_json::json!(format!("/n/devinfo/../devinfo/dpdk-net-{cid}_net1")),
        serde_json::json!("/n/devinfo/sub/x"),
        serde_json::json!("devinfo/x"),
        serde_json::json!("/n/devinfo/"),
        serde_json::json!(7),
    ] {
        let e = d
            .device_info_file(Some(&bad), "dpdk-net", cid, "net1")
            .unwrap_err();
        assert_eq!(e.code(), 7, "{bad}: {e}");
        assert!(e.to_string().contains("CNIDeviceInfoFile"), "{e}");
    }
}

#[test]
fn the_device_info_file_is_npwg_1_1_and_goes_with_the_attachment() {
    let base = tempdir("devinfo");
    let d = dirs(&base);
    let mut p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
    p.device_info = Some(d.device_info_path("dpdk-net", "3f2a9c1e7d40", "net1"));
    create(&d, &p).unwrap();
    write_info(&d, &p, &serde_json::json!({})).unwrap();
    let back: serde_json::Value =
        serde_json::from_slice(&fs::read(p.device_info.as_ref().unwrap()).unwrap()).unwrap();
    assert_eq!(
        back,
        serde_json::json!({"type": "vhost-user", "version": "1.1.0",
            "vhost-user": {"mode": "server", "path": "/var/run/vhost/net1.sock"}})
    );
    remove(&d, &p, true).unwrap();
    assert!(!p.device_info.as_ref().unwrap().exists());
    assert!(!p.pod_dir.exists());
    fs::remove_dir_all(&base).unwrap();
}

#[test]
fn the_socket_goes_with_the_attachment_and_a_file_in_its_place_stays() {
    use std::os::unix::net::UnixListener;
    let base = tempdir("socket");
    let d = dirs(&base);
    let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
    create(&d, &p).unwrap();
    // Still listening or not, the socket goes: without the port it leads nowhere.
    let _live = UnixListener::bind(&p.socket).unwrap();
    remove(&d, &p, true).unwrap();
    assert!(!p.socket.exists());
    assert!(!p.pod_dir.exists());
    // Not a socket: not the application's socket, left with its directory.
    create(&d, &p).unwrap();
    fs::write(&p.socket, b"").unwrap();
    remove(&d, &p, true).unwrap();
    assert!(p.socket.exists());
    fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_release_removes_only_what_is_of_its_kind_follows_nothing_and_never_fails() {
    let base = tempdir("plants");
    let d = dirs(&base);
    let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
    let victim = base.join("victim");
    fs::write(&victim, b"not the pod's").unwrap();
    // At each name, each kind a pod can put there: a full directory, a link, a FIFO.
    let tmp = tmp_of(&p.info);
    for (at, kind) in [&p.info, &tmp, &p.socket]
        .into_iter()
        .flat_map(|at| ["dir", "link", "fifo"].map(|k| (at, k)))
    {
        create(&d, &p).unwrap();
        match kind {
            "dir" => fs::create_dir_all(at.join("sub")).unwrap(),
            "link" => symlink(&victim, at).unwrap(),
            _ => nix::unistd::mkfifo(at, files::mode(0o600)).unwrap(),
        }
        remove(&d, &p, true).unwrap();
        assert!(fs::symlink_metadata(&p.link).is_err(), "{at:?}: link left");
        assert!(fs::symlink_metadata(at).is_ok(), "{at:?}: removed");
        assert_eq!(fs::read(&victim).unwrap(), b"not the pod's");
        // A repeated release is done as well.
        remove(&d, &p, true).unwrap();
        fs::remove_dir_all(&p.pod_dir).unwrap();
    }
    // The pod's directory itself replaced by a symlink, or a file: left, not followed.
    let elsewhere = base.join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::write(elsewhere.join("net1.json"), b"{}").unwrap();
    create(&d, &p).unwrap();
    fs::remove_dir(&p.pod_dir).unwrap();
    symlink(&elsewhere, &p.pod_dir).unwrap();
    remove(&d, &p, true).unwrap();
    assert!(elsewhere.join("net1.json").exists());
    assert!(fs::symlink_metadata(&p.pod_dir).unwrap().is_symlink());
    fs::remove_file(&p.pod_dir).unwrap();
    fs::write(&p.pod_dir, b"").unwrap();
    remove(&d, &p, true).unwrap();
    assert!(p.pod_dir.is_file());
    fs::remove_file(&p.pod_dir).unwrap();
    // Another pod's directory: the link goes, nothing in it.
    create(&d, &p).unwrap();
    fs::write(&p.info, b"{}").unwrap();
    remove(&d, &p, false).unwrap();
    assert!(fs::symlink_metadata(&p.link).is_err());
    assert!(p.info.exists());
    fs::remove_dir_all(&base).unwrap();
}
