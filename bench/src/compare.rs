//! `--compare`: two builds of the plugin, ADD+DEL times and traced peak RSS, interleaved,
//! printed only.

use crate::context::{Ctx, check_interrupt};
use crate::error::R;
use crate::measure::{expect_add, expect_del};
use crate::phases::single::{Rss, Variant};
use crate::report::format::f2;
use crate::report::machine::kb;
use crate::stats::stats;

use contrail_testkit::Netns;
use std::path::Path;

/// `--compare`: two builds of the plugin, interleaved, ADD+DEL times and traced peak RSS.
pub(crate) fn compare(cx: &Ctx, other: &Path) -> R<()> {
    let ns = Netns::new();
    let scratch = cx.scratch("compare");
    let bins = [cx.opts.plugin.as_path(), other];
    let mut v = [Variant::default(), Variant::default()];
    let mut rss = [Rss::default(), Rss::default()];
    let total = cx.sizes.warmup + cx.sizes.runs;
    for i in 0..total {
        check_interrupt()?;
        if i % 20 == 0 {
            eprintln!("  compare run {i}/{total}");
        }
        for k in [i % 2, 1 - i % 2] {
            let env = cx.env(&cx.node, "ADD", &ns, &cx.bench_pod.name);
            let add = env.run(bins[k], &cx.ours_conf, &scratch)?;
            expect_add("compare", &add)?;
            let del = env.with("DEL").run(bins[k], &cx.ours_conf, &scratch)?;
            expect_del("compare", &del)?;
            if i >= cx.sizes.warmup {
                v[k].push(add.ms(), del.ms());
            }
        }
    }
    for _ in 0..cx.sizes.rss_runs {
        for k in 0..2 {
            let env = cx.env(&cx.node, "ADD", &ns, &cx.bench_pod.name);
            rss[k].push("ADD", env.traced(bins[k], &cx.ours_conf, &scratch)?)?;
            rss[k].push(
                "DEL",
                env.with("DEL").traced(bins[k], &cx.ours_conf, &scratch)?,
            )?;
        }
    }
    eprintln!(
        "| build | ADD median | DEL median | ADD+DEL median | p95 | peak RSS KiB | size KiB |"
    );
    for k in 0..2 {
        let (a, d, t) = (stats(&v[k].add), stats(&v[k].del), stats(&v[k].total));
        eprintln!(
            "| {} | {} | {} | {} | {} | {} | {:.0} |",
            bins[k].display(),
            f2(a.median),
            f2(d.median),
            f2(t.median),
            f2(t.p95),
            rss[k].peak(),
            kb(bins[k])
        );
    }
    Ok(())
}
