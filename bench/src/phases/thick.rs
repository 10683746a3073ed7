//! Section 5: thick mode, one call for all of a pod's 1, 4, 16 or 64 interfaces.

use crate::context::{Ctx, THICK_SIZES, check_interrupt};
use crate::error::R;
use crate::measure::{expect_add, expect_del};
use crate::phases::checks::assert_empty;
use crate::stats::{Stats, stats};

use contrail_testkit::Netns;

pub(crate) struct Thick {
    pub(crate) n: usize,
    pub(crate) add: Stats,
    pub(crate) del: Stats,
    /// Peak RSS of one ADD and one DEL, traced.
    pub(crate) rss_kb: u64,
}

pub(crate) fn thick(cx: &Ctx) -> R<Vec<Thick>> {
    let scratch = cx.scratch("thick");
    let nss: Vec<Netns> = THICK_SIZES.iter().map(|_| Netns::new()).collect::<Vec<_>>();
    let mut add: Vec<Vec<f64>> = vec![Vec::new(); THICK_SIZES.len()];
    let mut del = add.clone();
    let mut rss = vec![0u64; THICK_SIZES.len()];
    let rounds = 1 + cx.sizes.thick_reps.iter().max().copied().unwrap_or(0);
    for round in 0..rounds {
        check_interrupt()?;
        eprintln!("  thick round {round}/{rounds}");
        for (k, (&n, pod)) in THICK_SIZES.iter().zip(&cx.thick_pods).enumerate() {
            // Round 0 warms up; then each size until it has its repetitions.
            if round > cx.sizes.thick_reps[k] {
                continue;
            }
            let env = cx.env(&cx.thick_node, "ADD", &nss[k], &pod.name);
            let a = env.run(&cx.opts.thick, &cx.ours_conf, &scratch)?;
            expect_add(&format!("thick x{n}"), &a)?;
            if round == 0 {
                let names = nss[k].ifnames();
                if names.len() != n + 1 {
                    return Err(format!(
                        "thick x{n}: {} interfaces in the pod",
                        names.len() - 1
                    ));
                }
            }
            let d = env
                .with("DEL")
                .run(&cx.opts.thick, &cx.ours_conf, &scratch)?;
            expect_del(&format!("thick x{n}"), &d)?;
            if round == 0 {
                assert_empty(&nss[k], &format!("thick x{n}"))?;
                // One traced ADD+DEL per size for its peak RSS.
                let env = cx.env(&cx.thick_node, "ADD", &nss[k], &pod.name);
                for e in [&env, &env.with("DEL")] {
                    let (ok, peaks) = e.traced(&cx.opts.thick, &cx.ours_conf, &scratch)?;
                    if !ok {
                        return Err(format!("thick x{n}: {} failed under ptrace", e.command));
                    }
                    rss[k] = rss[k].max(peaks.first().map_or(0, |p| p.hwm));
                }
            } else {
                add[k].push(a.ms());
                del[k].push(d.ms());
            }
        }
    }
    Ok(THICK_SIZES
        .iter()
        .enumerate()
        .map(|(k, &n)| Thick {
            n,
            add: stats(&add[k]),
            del: stats(&del[k]),
            rss_kb: rss[k],
        })
        .collect())
}
