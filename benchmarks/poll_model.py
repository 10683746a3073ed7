#!/usr/bin/env python3
"""How the node's budget should spend its polls: a model of section 9's reboot storm.

110 pods x 4 attachments, each pod's ADDs one after another, IP configurations uniform 2-5 s
after registration, R = 200 polls a second, a call's polls at least 21 ms apart. Only the polls
are modelled (the requests before a registration go ahead of them). Policies:
  fifo    every waiting call polled in turn (the budget before issue 38)
  oldest  the call that registered first polled first
  defer   fifo, but while polls queue a call polls only once it has waited 0.9x the shortest
          registration-to-answer wait seen so far (what docs/configuration.md describes)
Prints, per policy and seed: an ADD's time beyond its IP delay (median, p95, s), the last pod
whole against polling without a budget, and the polls sent. Then the first wave's share of the
last pod's lateness: the same storm with each pod's first registration spread over the 1.1 s
that 110 pods' `GET /vm-cfg` and `POST /vm` take at 200 requests a second (as the budget
sends them), against all at once (as polling without a budget does), the polls left 78% of the
budget (section 9 measures the rest going to the requests ahead of polls).
Run: python3 benchmarks/poll_model.py
"""
import random
import statistics

R, PODS, K, PERIOD = 200, 110, 4, 0.021


def run(policy, seed, first_wave=0.0, share=1.0):
    rnd = random.Random(seed)
    delays = [[rnd.uniform(2.0, 5.0) for _ in range(K)] for _ in range(PODS)]
    t, done, polls, shortest = 0.0, 0, 0, None
    k, reg, start, due = [0] * PODS, [0.0] * PODS, [0.0] * PODS, [0.0] * PODS
    for p in range(PODS):
        reg[p] = due[p] = rnd.uniform(0.0, first_wave)
    beyond, whole = [], [0.0] * PODS

    def ready(p):
        if policy == "defer" and shortest is not None:
            return max(due[p], reg[p] + 0.9 * shortest)
        return due[p]

    while done < PODS:
        waiting = [p for p in range(PODS) if k[p] < K and ready(p) <= t]
        if not waiting:
            t = min(ready(p) for p in range(PODS) if k[p] < K)
            continue
        key = (lambda p: reg[p]) if policy == "oldest" else (lambda p: (due[p], p))
        p = min(waiting, key=key)
        polls += 1
        if t - reg[p] >= delays[p][k[p]]:
            shortest = min(shortest or 1e9, t - reg[p])
            beyond.append(t - start[p] - delays[p][k[p]])
            k[p] += 1
            if k[p] == K:
                whole[p], done = t, done + 1
            else:
                start[p] = reg[p] = due[p] = t
        else:
            due[p] = t + PERIOD
        t += 1 / (R * share)
    unbudgeted = max(sum(d + PERIOD / 2 for d in ds) for ds in delays)
    p95 = sorted(beyond)[int(0.95 * len(beyond))]
    return statistics.median(beyond), p95, max(whole) / unbudgeted, polls


for policy in ("fifo", "oldest", "defer"):
    for seed in range(3):
        med, p95, whole, polls = run(policy, seed)
        print(f"{policy:6} seed {seed}: beyond median {med:.3f} s, p95 {p95:.3f} s, "
              f"last pod whole {whole:.3f}x unbudgeted, {polls} polls")

for first_wave in (0.0, 1.1):
    runs = [run("defer", seed, first_wave, share=0.78) for seed in range(8)]
    wholes = [r[2] for r in runs]
    print(f"defer, first registrations over {first_wave} s: last pod whole "
          f"{statistics.mean(wholes):.3f}x mean, {max(wholes):.3f}x worst of 8 seeds")
