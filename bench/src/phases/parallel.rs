//! Section 6: pods ADDed (then DELed) in parallel, each in its own netns; and the threads
//! that start a set of calls at once, which section 7 uses too.

use crate::context::{Ctx, check_interrupt};
use crate::error::R;
use crate::measure::{Call, CniEnv, expect_add, expect_del, ms};
use crate::phases::checks::assert_empty;
use crate::stats::{Stats, stats};

use contrail_testkit::Netns;
use std::fs;
use std::path::Path;
use std::sync::Barrier;
use std::time::Instant;

pub(crate) struct Parallel {
    pub(crate) pods: usize,
    pub(crate) add_total: f64,
    pub(crate) del_total: f64,
    pub(crate) add: Stats,
    pub(crate) del: Stats,
    pub(crate) add_failures: Vec<String>,
    pub(crate) del_failures: Vec<String>,
    pub(crate) host_links: usize,
}

pub(crate) fn parallel(cx: &Ctx) -> R<Parallel> {
    eprintln!("  creating {} pod netns", cx.parallel_pods.len());
    let nss: Vec<Netns> = (0..cx.parallel_pods.len())
        .map(|_| Netns::new())
        .collect::<Vec<_>>();
    let sandboxes: Vec<CniEnv> = cx
        .parallel_pods
        .iter()
        .zip(&nss)
        .map(|(p, ns)| cx.env(&cx.node, "ADD", ns, &p.name))
        .collect();
    let calls = |command| -> Vec<Sequence> {
        let conf = cx.ours_conf.as_path();
        sandboxes
            .iter()
            .map(|s| vec![(s.with(command), conf)])
            .collect()
    };
    let (add_calls, del_calls) = (calls("ADD"), calls("DEL"));
    check_interrupt()?;
    eprintln!("  {} ADDs at once", add_calls.len());
    let adds: Vec<Call> = all_at_once(cx, &add_calls, false)?
        .into_iter()
        .flatten()
        .collect();
    let host_links = fs::read_dir("/sys/class/net")
        .map(|d| d.filter_map(Result::ok).count())
        .unwrap_or(0);
    eprintln!("  {} DELs at once", del_calls.len());
    let dels: Vec<Call> = all_at_once(cx, &del_calls, true)?
        .into_iter()
        .flatten()
        .collect();
    let failures = |calls: &[Call], add: bool| -> Vec<String> {
        calls
            .iter()
            .filter_map(|c| {
                let r = if add {
                    expect_add("", c)
                } else {
                    expect_del("", c)
                };
                r.err()
            })
            .collect()
    };
    let p = Parallel {
        pods: add_calls.len(),
        add_total: span(&adds),
        del_total: span(&dels),
        add: stats(&adds.iter().map(Call::ms).collect::<Vec<_>>()),
        del: stats(&dels.iter().map(Call::ms).collect::<Vec<_>>()),
        add_failures: failures(&adds, true),
        del_failures: failures(&dels, false),
        host_links,
    };
    for ns in &nss {
        assert_empty(ns, "parallel DEL")?;
    }
    Ok(p)
}

/// From the first call's start to the last one's end, ms.
pub(crate) fn span<'a>(calls: impl IntoIterator<Item = &'a Call>) -> f64 {
    let mut bounds: Option<(Instant, Instant)> = None;
    for c in calls {
        bounds = Some(bounds.map_or((c.start, c.end), |(s, e)| (s.min(c.start), e.max(c.end))));
    }
    bounds.map_or(0.0, |(s, e)| ms(e - s))
}

/// One pod's calls in the order its meta-plugin makes them: each call's environment and config.
pub(crate) type Sequence<'a> = Vec<(CniEnv, &'a Path)>;

/// One thread per pod, all released together by a barrier; each runs its pod's calls in order,
/// stopping at the first that fails unless `keep_going` (Multus stops its ADDs at a failure,
/// and goes on with its DELs). The calls each pod made.
pub(crate) fn all_at_once(cx: &Ctx, pods: &[Sequence], keep_going: bool) -> R<Vec<Vec<Call>>> {
    let barrier = Barrier::new(pods.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, sequence)| {
                let barrier = &barrier;
                s.spawn(move || -> R<Vec<Call>> {
                    let scratch = cx.scratch(&format!("par{i}"));
                    barrier.wait();
                    let mut calls = Vec::new();
                    for (env, conf) in sequence {
                        let call = env.run(&cx.opts.plugin, conf, &scratch)?;
                        let failed = !call.ok;
                        calls.push(call);
                        if failed && !keep_going {
                            break;
                        }
                    }
                    Ok(calls)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "thread panicked".to_string())?)
            .collect()
    })
}
