//! Section 4: the state directory on ext4 on a loop device, on tmpfs and in the temporary
//! directory: ADD and DEL, and their fsyncs.

use crate::context::{Ctx, check_interrupt, node_in};
use crate::error::R;
use crate::measure::{expect_add, expect_del};
use crate::mount::Mount;
use crate::phases::checks::assert_empty;

use contrail_testkit::{Netns, try_sh};
use std::collections::BTreeMap;
use std::path::Path;

/// The filesystem a path is on, as `findmnt` names it: "ext4 on /dev/vda".
fn filesystem_of(path: &Path) -> String {
    let path = path.to_string_lossy();
    try_sh("findmnt", &["-n", "-o", "FSTYPE,SOURCE", "-T", &path])
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" on "))
        .unwrap_or_else(|_| "?".into())
}

/// One filesystem of the state directory: ADD and DEL times, and the syncs of one of each.
pub(crate) struct Disk {
    pub(crate) fs: String,
    pub(crate) add: Vec<f64>,
    pub(crate) del: Vec<f64>,
    pub(crate) add_syncs: BTreeMap<String, u64>,
    pub(crate) del_syncs: BTreeMap<String, u64>,
}

/// One attachment's ADD and DEL with the state directory on ext4 on a loop device (as in the
/// other phases), on tmpfs and in the temporary directory, interleaved; then one ADD and one
/// DEL of each under strace, counting their syncs.
pub(crate) fn disk(cx: &Ctx) -> R<Vec<Disk>> {
    let tmpfs = Mount::tmpfs(cx.dir.0.join("tmpfs"), "")?;
    let places = [
        (
            format!(
                "{} (a sparse 64 MiB file in the temp dir), as in the other phases",
                filesystem_of(&cx.ext4.dir)
            ),
            cx.ext4.dir.join("disk-ports"),
        ),
        ("tmpfs".to_string(), tmpfs.dir.join("ports")),
        (
            format!("the temp dir: {}", filesystem_of(&cx.dir.0)),
            cx.dir.0.join("ports"),
        ),
    ];
    let nodes: Vec<_> = places
        .iter()
        .map(|(_, dir)| node_in(&cx.sim, dir))
        .collect();
    let mut rows: Vec<Disk> = places
        .into_iter()
        .map(|(fs, _)| Disk {
            fs,
            add: Vec::new(),
            del: Vec::new(),
            add_syncs: BTreeMap::new(),
            del_syncs: BTreeMap::new(),
        })
        .collect();
    let ns = Netns::new();
    let scratch = cx.scratch("disk");
    let total = cx.sizes.warmup + cx.sizes.disk_runs;
    for i in 0..total {
        check_interrupt()?;
        if i % 20 == 0 {
            eprintln!("  ADD+DEL run {i}/{total}");
        }
        for k in 0..rows.len() {
            let k = (i + k) % rows.len();
            let env = cx.env(&nodes[k], "ADD", &ns, &cx.bench_pod.name);
            let add = env.run(&cx.opts.plugin, &cx.ours_conf, &scratch)?;
            expect_add(&rows[k].fs, &add)?;
            let del = env
                .with("DEL")
                .run(&cx.opts.plugin, &cx.ours_conf, &scratch)?;
            expect_del(&rows[k].fs, &del)?;
            if i >= cx.sizes.warmup {
                rows[k].add.push(add.ms());
                rows[k].del.push(del.ms());
            }
        }
    }
    eprintln!("  syncs of one ADD and one DEL under strace");
    for (row, node) in rows.iter_mut().zip(&nodes) {
        let conf = &cx.ours_conf;
        let env = cx.env(node, "ADD", &ns, &cx.bench_pod.name);
        let (added, add) = env.syncs(&cx.opts.plugin, conf, &scratch)?;
        let (deleted, del) = env.with("DEL").syncs(&cx.opts.plugin, conf, &scratch)?;
        if !(added && deleted) {
            return Err(format!("{}: ADD or DEL failed under strace", row.fs));
        }
        (row.add_syncs, row.del_syncs) = (add, del);
    }
    assert_empty(&ns, "state directory on a disk")?;
    Ok(rows)
}
