//! Sections 1-8 of the generated section: each measurement's tables and notes.

use crate::context::{NODE_ATTACHMENTS, NODE_IP_DELAY_MS};
use crate::phases::node::Wave;
use crate::report::format::{f1, f2};
use crate::report::results::{Report, marginals, poll_half};
use crate::stats::stats;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// The sync calls of one call by name, "2 fsync, 1 fdatasync"; "none" for none.
fn syncs(counts: &BTreeMap<String, u64>) -> String {
    let v: Vec<String> = counts.iter().map(|(n, c)| format!("{c} {n}")).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Sections 1-2: one attachment's ADD and DEL against ptp + static and the floor.
pub(crate) fn one_attachment(m: &mut String, r: &Report) {
    let s = &r.single;
    let ours_add = stats(&s.ours.add);
    let (req_add, req_del) = r.requests_per_call();
    let floor = r.floor();
    let _ = writeln!(
        m,
        "\n## 1-2. One attachment: ADD and DEL ({} runs each, interleaved, after {} warm-up \
         runs)\n",
        ours_add.n, r.warmup
    );
    let _ = writeln!(
        m,
        "Times in ms, from spawn to reaping (`wait4`); the raw rows are in-process. \
         The simulator answers at once.\n"
    );
    let _ = writeln!(
        m,
        "| | ADD median | ADD p95 | ADD min | DEL median | DEL p95 | DEL min | agent requests, ADD / DEL |\n|---|---|---|---|---|---|---|---|"
    );
    let rows = [
        ("contrail-k8s-cni", &s.ours),
        ("contrail-k8s-cni, vhost-user attachment", &s.vhost),
        ("ptp + static", &s.ptp),
        ("floor: raw rtnetlink (netns, sockets, operations)", &s.raw),
        ("raw rtnetlink, operations only", &s.raw_ops),
    ];
    for (name, v) in rows {
        let (a, d) = (stats(&v.add), stats(&v.del));
        let requests = if name == "contrail-k8s-cni" {
            format!("{req_add} / {req_del}")
        } else {
            "-".into()
        };
        let _ = writeln!(
            m,
            "| {name} | {} | {} | {} | {} | {} | {} | {requests} |",
            f2(a.median),
            f2(a.p95),
            f2(a.min),
            f2(d.median),
            f2(d.p95),
            f2(d.min),
        );
    }
    for (name, v) in [
        ("floor: an empty static program (`cc -static`)", &s.empty),
        (
            "floor: the agent's requests of one ADD, one connection",
            &s.agent,
        ),
    ] {
        let a = stats(v);
        let _ = writeln!(
            m,
            "| {name} | {} | {} | {} | | | | 3 / - |",
            f2(a.median),
            f2(a.p95),
            f2(a.min),
        );
    }
    let _ = writeln!(
        m,
        "| **floor of an ADD** (the three floor rows' medians) | {} | | | | | | |",
        f2(floor)
    );
    let (vo, vp, vt) = (
        stats(&s.version_ours),
        stats(&s.version_ptp),
        stats(&s.version_true),
    );
    let _ = writeln!(
        m,
        "\nStart-up alone (`VERSION`, median): contrail-k8s-cni {} ms, ptp {} ms, `/bin/true` \
         (dynamically linked) {} ms.",
        f2(vo.median),
        f2(vp.median),
        f2(vt.median),
    );
    let _ = writeln!(
        m,
        "\nptp's ADD execs `static` (two processes) and does a little more kernel work than \
         contrail-k8s-cni: it creates the veth inside the pod and moves the host end out, and \
         also puts the gateway address and a host route on the host end. contrail-k8s-cni's \
         ADD additionally makes {req_add} requests to the agent (the pod, the port \
         registration, the IP configuration) and writes its state file (no fsync, section 4) \
         under the pod lock; its DEL makes {req_del} (the deregistration) and removes the file. \
         The floor has no files and no parsing of its own; most of every DEL is the kernel's \
         veth deletion, which waits for an RCU grace period. The vhost-user row is the same \
         network as a vhost-user attachment on a DPDK node: `POST /port` instead of `POST /vm`, \
         the pod's directory, a symlink and a JSON file instead of a veth; its DEL makes one \
         request (`DELETE /port/<vmi>`) and deletes no kernel interface."
    );
    let _ = writeln!(
        m,
        "\nADD+DEL of each run, for comparison with earlier runs (no longer a target):\n"
    );
    let _ = writeln!(m, "| | median | p95 | min | max |\n|---|---|---|---|---|");
    for (name, v) in rows.iter().filter(|(n, _)| !n.starts_with("raw rtnetlink")) {
        let t = stats(&v.total);
        let _ = writeln!(
            m,
            "| {name} | {} | {} | {} | {} |",
            f2(t.median),
            f2(t.p95),
            f2(t.min),
            f2(t.max)
        );
    }
}

/// Section 3: peak RSS and binary size.
pub(crate) fn rss_and_sizes(m: &mut String, r: &Report) {
    let s = &r.single;
    let _ = writeln!(m, "\n## 3. Peak RSS and binary size\n");
    let _ = writeln!(
        m,
        "Peak RSS (`VmHWM`) of each process of a call, read under ptrace as it exits \
         ({} runs of each call, after the timed runs; the largest process counts). \
         `wait4`'s `ru_maxrss` cannot be used: a child started with vfork (Rust's `Command`, \
         Go's `os/exec`) keeps, across `execve`, the high-water mark of the parent memory it \
         borrowed, so it reports at least the spawner's RSS: here {} KiB even for `/bin/true`.\n",
        s.rss.first().map_or(0, |r| r.1.largest.len()),
        s.wait4_true_kb
    );
    let _ = writeln!(
        m,
        "| call | peak RSS of the largest process, KiB | median, KiB | private memory at exit, all processes, median KiB | every process: peak KiB (private + file-backed at exit) |\n|---|---|---|---|---|"
    );
    for (label, r) in &s.rss {
        let _ = writeln!(
            m,
            "| {label} | {} | {} | {} | {} |",
            r.peak(),
            stats(&r.largest).median,
            stats(&r.anon).median,
            r.processes()
        );
    }
    let _ = writeln!(
        m,
        "| contrail-k8s-cni `--features thick`, 1..64 interfaces | {} | | | |",
        r.thick.iter().map(|t| t.rss_kb).max().unwrap_or(0)
    );
    let _ = writeln!(m, "\n| binary | size, KiB |\n|---|---|");
    for (name, kb) in &r.sizes_kb {
        let _ = writeln!(m, "| {name} | {kb:.0} |");
    }
}

/// Section 4: the state directory on other filesystems.
pub(crate) fn state_directory(m: &mut String, r: &Report) {
    let _ = writeln!(m, "\n## 4. The state directory on other filesystems\n");
    let _ = writeln!(
        m,
        "One attachment's ADD and DEL with `config-dir` on ext4 on a loop device (a sparse 64 \
         MiB file, `mkfs.ext4 -q`, mounted in the benchmark's own mount namespace), where the \
         other phases keep it, on tmpfs, and in the benchmark's temporary directory; {} runs \
         each, interleaved, after {} warm-up runs. fsyncs: the fsync, fdatasync and \
         sync_file_range calls of one ADD and one DEL, by name, counted by `strace -f -c`.\n",
        r.disk.first().map_or(0, |d| d.add.len()),
        r.warmup
    );
    let _ = writeln!(
        m,
        "| filesystem | ADD median, ms | DEL median, ms | fsyncs per ADD | fsyncs per DEL |\n|---|---|---|---|---|"
    );
    for d in &r.disk {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} |",
            d.fs,
            f2(stats(&d.add).median),
            f2(stats(&d.del).median),
            syncs(&d.add_syncs),
            syncs(&d.del_syncs)
        );
    }
}

/// Section 5: thick mode.
pub(crate) fn thick_mode(m: &mut String, r: &Report) {
    let add_m = marginals(&r.thick, |t| t.add.median);
    let del_m = marginals(&r.thick, |t| t.del.median);
    let _ = writeln!(
        m,
        "\n## 5. Thick mode: one call for all of a pod's interfaces\n"
    );
    let _ = writeln!(
        m,
        "| interfaces | runs | ADD median, ms | ADD per interface | DEL median, ms | DEL per interface | peak RSS (traced), KiB |\n|---|---|---|---|---|---|---|"
    );
    for t in &r.thick {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} |",
            t.n,
            t.add.n,
            f1(t.add.median),
            f2(t.add.median / t.n as f64),
            f1(t.del.median),
            f2(t.del.median / t.n as f64),
            t.rss_kb
        );
    }
    let _ = writeln!(
        m,
        "\nMarginal cost of one more interface (slope between sizes), ms:\n"
    );
    let _ = writeln!(m, "| sizes | ADD | DEL |\n|---|---|---|");
    for (a, d) in add_m.iter().zip(&del_m) {
        let _ = writeln!(m, "| {} → {} | {} | {} |", a.0, a.1, f2(a.2), f2(d.2));
    }
}

/// Section 6: pods ADDed in parallel.
pub(crate) fn parallel_pods(m: &mut String, r: &Report) {
    let p = &r.parallel;
    let ours_add = stats(&r.single.ours.add);
    let _ = writeln!(m, "\n## 6. {} pods ADDed in parallel\n", p.pods);
    let _ = writeln!(
        m,
        "Each pod has its own netns and simulated pod (one VMI); all {n} ADDs are started \
         together (one thread each, released by a barrier), then all {n} DELs.\n",
        n = p.pods
    );
    let _ = writeln!(
        m,
        "| | all done after, ms | per call median, ms | per call max, ms | failures |\n|---|---|---|---|---|"
    );
    let _ = writeln!(
        m,
        "| ADD | {} | {} | {} | {} |",
        f1(p.add_total),
        f1(p.add.median),
        f1(p.add.max),
        p.add_failures.len()
    );
    let _ = writeln!(
        m,
        "| DEL | {} | {} | {} | {} |",
        f1(p.del_total),
        f1(p.del.median),
        f1(p.del.max),
        p.del_failures.len()
    );
    let serial = ours_add.median * p.pods as f64;
    let _ = writeln!(
        m,
        "\nFor comparison, {} sequential ADDs at the single-attachment median would take {} ms. \
         After the ADDs the node namespace had {} links (lo + one host end per pod).",
        p.pods,
        f1(serial),
        p.host_links
    );
    for f in p.add_failures.iter().chain(&p.del_failures).take(3) {
        let _ = writeln!(m, "\nFailure: `{}`", f.replace('`', "'"));
    }
}

/// Section 7: the full node's rounds, and what its checks found.
pub(crate) fn node_section(m: &mut String, r: &Report) {
    let Some(full) = r.node.last() else {
        return;
    };
    let _ = writeln!(
        m,
        "\n## 7. A full node: up to {} pods with {} attachments each\n",
        full.pods,
        NODE_ATTACHMENTS.len()
    );
    let _ = writeln!(
        m,
        "Each pod as Multus attaches it: eth0 on the cluster network (config name \
         `contrail-k8s-cni`), net1 and net2 on net-a (one network twice), net3 on net-b; one \
         VMI each, whose IP configuration comes at a random moment 0..{NODE_IP_DELAY_MS} ms \
         after its registration (fixed seed). A pod's calls run in one sandbox in Multus's \
         order (ADD eth0, net1, net2, net3; DEL the reverse); the pods run in parallel, one \
         thread each, released together. Checked after the ADDs: each pod has exactly these \
         interfaces, each with its own VMI's MAC (`ip -j link show` in the pod; MACs are \
         unique on the node, so no VMI serves two), every VMI is registered; after the DELs: no \
         link but lo in the node and the pods, nothing in the state directory but its empty \
         lock directory, no registration left. Per pod: all done after / pods.\n"
    );
    let _ = writeln!(
        m,
        "| pods | ADD: all done after, ms | ADD per pod, ms | one pod's ADDs, median ms | agent requests | DEL: all done after, ms | DEL per pod, ms | one pod's DELs, median ms | agent requests | failures | checks |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for n in &r.node {
        let checks = if n.problems.is_empty() {
            "passed".to_string()
        } else {
            format!("**{} problems**", n.problems.len())
        };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {checks} |",
            n.pods,
            f1(n.add.total),
            f1(n.add.total / n.pods as f64),
            f1(n.add.pod.median),
            n.add.requests,
            f1(n.del.total),
            f1(n.del.total / n.pods as f64),
            f1(n.del.pod.median),
            n.del.requests,
            n.add.failures.len() + n.del.failures.len()
        );
    }
    let attachments = (full.pods * NODE_ATTACHMENTS.len()) as f64;
    let _ = writeln!(
        m,
        "\nThe agent's requests per attachment in the round of {} pods, by method, route and \
         answer (counted by the simulator). A 404 of a GET is a poll that found nothing yet \
         (or, for a repeated network, the one look at whether a VMI is registered yet); \
         every other request is one of the call's own steps.\n",
        full.pods
    );
    let _ = writeln!(m, "| request | per ADD | per DEL |\n|---|---|---|");
    let kinds: BTreeSet<&String> = full
        .add
        .by_kind
        .keys()
        .chain(full.del.by_kind.keys())
        .collect();
    let per = |w: &Wave, k: &str| w.by_kind.get(k).copied().unwrap_or(0) as f64 / attachments;
    for k in &kinds {
        let _ = writeln!(
            m,
            "| `{k}` | {} | {} |",
            f2(per(&full.add, k)),
            f2(per(&full.del, k))
        );
    }
    let split = |w: &Wave| {
        let polls: u64 = w
            .by_kind
            .iter()
            .filter(|(k, _)| k.starts_with("GET ") && k.ends_with(" 404"))
            .map(|(_, n)| n)
            .sum();
        let n = attachments;
        ((w.requests - polls) as f64 / n, polls as f64 / n)
    };
    let ((add_steps, add_polls), (del_steps, del_polls)) = (split(&full.add), split(&full.del));
    let _ = writeln!(
        m,
        "| **steps** (not a 404 of a GET) | {} | {} |\n| **polls** (a 404 of a GET) | {} | {} |",
        f2(add_steps),
        f2(del_steps),
        f2(add_polls),
        f2(del_polls)
    );
    let found = r.node.iter().flat_map(|n| {
        n.add
            .failures
            .iter()
            .chain(&n.del.failures)
            .chain(&n.problems)
    });
    for f in found.take(3) {
        let _ = writeln!(m, "\nFound: `{}`", f.replace('`', "'"));
    }
}

/// Section 8: the readiness lag.
pub(crate) fn readiness_lag(m: &mut String, r: &Report) {
    let (req_add, req_del) = r.requests_per_call();
    let rate = r.waiting_rate();
    let lag = &r.ready.lag;
    let ours_add = stats(&r.single.ours.add);
    let _ = writeln!(m, "\n## 8. Readiness lag\n");
    let extra = r.ready.requests as f64 - lag.n as f64 * (req_add + req_del);
    let _ = writeln!(
        m,
        "{} pods whose VMI gets its IP configuration at a random moment (`ip-delay-ms` uniform in \
         0..2000 after the registration, fixed seed), {} at a time; default `poll-timeout` and \
         `poll-retries`. Lag = when ADD returned minus the moment the simulator started answering \
         with the IP config (its registration time plus the delay); it includes the rest of the \
         ADD (addresses, routes) after the VMI is seen ready. The agent served {} requests during \
         these ADDs and their DELs: {} more than the same calls make with the agent answering at \
         once, made while the ADDs waited {} s in all (from their registration to their \
         return).\n",
        lag.n,
        r.workers,
        r.ready.requests,
        extra,
        f1(r.ready.waiting_s)
    );
    let _ = writeln!(
        m,
        "| | median, ms | p95, ms | worst, ms | best, ms |\n|---|---|---|---|---|"
    );
    for (name, st) in [
        ("lag", lag),
        (
            "its first part: the ready moment to the poll that saw it",
            &r.ready.seen,
        ),
        (
            "its second part: that poll to the ADD's return (the rest of the ADD)",
            &r.ready.rest,
        ),
    ] {
        let _ = writeln!(
            m,
            "| {name} | {} | {} | {} | {} |",
            f1(st.median),
            f1(st.p95),
            f1(st.max),
            f1(st.min)
        );
    }
    let _ = writeln!(
        m,
        "\nA waiting call made {} requests per waiting second. The first part's floor is half \
         the plugin's poll period (`POLL_PERIOD`, {} ms) on average: the ready moment falls \
         anywhere between two polls. Per sample it is known: the simulator says when the poll \
         before the one that saw it came (`sim-ip-missed-ns`), and the next was due a period \
         later; the poll that saw it came {} ms after that (median; {} of {} samples, those \
         whose IP configuration came after the plugin's two early polls).",
        f1(rate),
        f1(2.0 * poll_half()),
        f2(stats(&r.ready.late).median),
        r.ready.late.len(),
        lag.n
    );
    let _ = writeln!(
        m,
        "\nFor reference, the ADD median with the agent answering at once is {} ms.",
        f1(ours_add.median)
    );
}
