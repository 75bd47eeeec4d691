#!/usr/bin/env python3
"""Runs every real replay stint-sim has through it and prints one Markdown
table with each target of issue 21 beside the measured figure.

Every row is one deterministic stint-sim run (same inputs, same numbers), so
there is nothing to take a median of; the spread that matters is across
traces and loads, which is what the rows are.

  tools/stint-sim/sweep.py --sim build/tools/stint-sim/stint-sim --out /tmp/sweep
  tools/stint-sim/sweep.py --only philly-ee9e8c-32,spot-philly --jobs 2
  tools/stint-sim/sweep.py --spot-mix --seeds 1,2,3,4,5 --out /tmp/spot-mix   # issue 33

With --spot-mix it runs the priced spot-mix replays instead (Philly VCs and
synthetic jobs on on-prem + on-demand + revoked spot nodes, each over the
seeds) through stint, stint-first-fit and stint-cheapest-only, and prints
stint's cost, mean JCT and p99 JCT against first-fit's per seed and the
medians (targets: cost <= 0.75 x, mean JCT <= 1 x, p99 JCT <= 1.2 x).

Replays: the 13 Philly VC x cluster-size points (Helios Venus daily capacity
scaled to G GPUs), the spot mixes (Philly ee9e8c on 24 hard GPUs plus the
Bamboo g4dn spot nodes of 4 GPUs, once more with half the multi-GPU jobs
elastic; the Tiresias jobs on the g4dn nodes alone),
the multi-team replay (all 15264 Philly arrivals at once, each VC a team,
guarantees from the Helios per-VC GPU counts; once with borrowing
unlimited, once with each team's borrowing limited), and the published Alibaba pod-list excerpt
(tests/data/traces; no Helios job log is on this machine).

Targets (stint against the baselines): mean JCT <= 0.5 x FIFO and <= 0.8 x
Slurm-like; p99 queue delay <= 0.5 x FIFO+EASY; p99 JCT <= 1.2 x EASY; window
utilisation >= 0.85; Jain fairness >= Slurm-like's (multi-team; with
borrowing limits, Slurm-like's under the same limits, slurm-limits); lost
work 0.
Where the JCT target is out of reach for any policy, the bound is printed
beside the figure: the mean work over FIFO's mean JCT (zero queueing, no
interruption).
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

PHILLY_POINTS = ("ee9e8c:32,ee9e8c:48,ee9e8c:64,11cb48:24,11cb48:32,6c71a0:48,6c71a0:64,"
                 "6214e9:24,6214e9:64,7f04ca:16,e13805:16,2869ce:16,0e4a51:16")
POLICIES = "fifo,easy,slurm,slurm-limits,stint,stint-las,stint-no-queue-guard,stint-no-service,stint-no-starvation-guard,stint-no-shrink"


def replays(traces, data):
    """(name, stint-sim arguments) for every real replay."""
    helios = f"{traces}/helios-venus/cluster_gpu_number.csv"
    g4dn = f"{traces}/spot-bamboo/g4dn-trace.csv"
    out = []
    for point in PHILLY_POINTS.split(","):
        vc, gpus = point.split(":")
        out.append((f"philly-{vc}-{gpus}",
                    ["--trace", f"philly:{traces}/philly-gavel-msr-seed0/{vc}.trace", "--max-work-h", "48",
                     "--capacity", f"helios:{helios}:total:{gpus}"]))
    out.append(("spot-philly", ["--trace", f"philly:{traces}/philly-gavel-msr-seed0/ee9e8c.trace",
                                "--max-work-h", "48", "--capacity", f"fixed:24+bamboo-nodes:{g4dn}:4@spot"]))
    # The same with half the multi-GPU jobs elastic (min_gpus = max / 2):
    # shrink before preempt at work.
    out.append(("spot-philly-elastic", ["--trace", f"philly:{traces}/philly-gavel-msr-seed0/ee9e8c.trace",
                                        "--max-work-h", "48", "--elastic-fraction", "0.5",
                                        "--capacity", f"fixed:24+bamboo-nodes:{g4dn}:4@spot"]))
    out.append(("spot-tiresias", ["--trace", f"tiresias:{traces}/tiresias/60_job.csv",
                                  "--capacity", f"bamboo-nodes:{g4dn}:4@spot"]))
    # All 15264 arrivals of all VCs on 256 GPUs, borrowing unlimited; then
    # the same with each team's borrowing limited to 4 x its guarantee (the
    # tightest of 1, 2, 4 x that keeps window utilisation >= 0.85: 0.57,
    # 0.70, 0.90), so the limits bind (METHOD.md).
    multi = ["--trace", f"philly:{traces}/philly-gavel-msr-seed0", "--max-work-h", "48",
             "--capacity", f"helios:{helios}:total:256", "--team-guarantees", f"helios:{helios}:256"]
    out.append(("multi-team", multi))
    out.append(("multi-team-borrow", multi + ["--team-borrow-factor", "4"]))
    # The published Alibaba rows in tests/data (the Helios job log there is
    # hand-made, so it is no real replay and is left out).
    out.append(("alibaba-excerpt", ["--trace", f"alibaba:{data}/alibaba-gpu-v2023-openb_pod_list_default-head91.csv",
                                    "--capacity", "fixed:16"]))
    return out


# The price table of the spot-mix replays (per GPU-hour; round figures, not
# quotes): on-prem amortised, on-demand, spot at 35 % of on-demand. Listed in
# the order a cluster grows (own, rent, then spot): first-fit's order.
SPOT_MIX_PRICES = "onprem=on_prem:1.00,ondemand=on_demand:3.06,spot=spot:0.35*ondemand"
SPOT_MIX_POLICIES = "stint,stint-first-fit,stint-cheapest-only"
SPOT_MIX_SEEDS = "1,2,3,4,5"


def spot_mix_replays(traces):
    """(name, stint-sim arguments) for the priced spot-mix replays: Philly VCs
    and synthetic jobs on on-prem + on-demand + spot nodes (8 GPUs each), the
    spot nodes revoked at a rate (seeded by --seed)."""
    philly = f"{traces}/philly-gavel-msr-seed0"
    out = []
    # On-prem holds about two thirds of the mean demand (ee9e8c 23 GPUs,
    # 6c71a0 27, 6214e9 60), on-demand more than the peak, spot about as
    # much as on-prem; spot nodes live 6 h on average, 1 h until replaced.
    for vc, mix in (("ee9e8c", "2:8:4:6"), ("6c71a0", "2:8:4:6"), ("6214e9", "5:16:8:6")):
        out.append((f"spot-mix-{vc}", ["--trace", f"philly:{philly}/{vc}.trace", "--max-work-h", "48",
                                       "--capacity", f"spot-mix:{mix}"]))
    # The revocation rate Bamboo measured on g4dn spot nodes (74 revocations
    # in 136 node-hours: a mean life of 1.8 h).
    out.append(("spot-mix-ee9e8c-bamboo-rate", ["--trace", f"philly:{philly}/ee9e8c.trace", "--max-work-h", "48",
                                                "--capacity", "spot-mix:2:8:4:1.8"]))
    out.append(("spot-mix-ee9e8c-elastic", ["--trace", f"philly:{philly}/ee9e8c.trace", "--max-work-h", "48",
                                            "--elastic-fraction", "0.5", "--capacity", "spot-mix:2:8:4:6"]))
    # Synthetic jobs (seeded too): 400 arrivals, one per 30 min on average.
    out.append(("spot-mix-synthetic", ["--trace", "synthetic", "--synthetic-jobs", "400",
                                       "--synthetic-gap-s", "1800", "--capacity", "spot-mix:2:8:4:6"]))
    return [(name, args + ["--prices", SPOT_MIX_PRICES]) for name, args in out]


def run_one(sim, out, name, args, extra, reuse=False, policies=POLICIES):
    out_dir = os.path.join(out, name)
    os.makedirs(out_dir, exist_ok=True)
    if reuse and os.path.exists(os.path.join(out_dir, "results.json")):
        with open(os.path.join(out_dir, "results.json")) as f:
            return name, json.load(f)
    cmd = [sim] + args + ["--policies", policies, "--out", out_dir] + extra
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-2000:]}")
    with open(os.path.join(out_dir, "results.json")) as f:
        return name, json.load(f)


def ratio(a, b):
    return a / b if b > 0 else float("nan")


def check(value, ok, fmt="{:.3f}"):
    return f"{fmt.format(value)} {'✓' if ok else '✗'}"


def median(values):
    v = sorted(values)
    n = len(v)
    return float("nan") if n == 0 else (v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2)


def spot_mix_main(args):
    """Issue 33: cost against first-fit on the spot-mix replays, per seed and
    the median over seeds; stint-cheapest-only beside it."""
    todo = []
    for name, replay_args in spot_mix_replays(args.traces):
        for seed in args.seeds.split(","):
            todo.append((f"{name}/seed{seed}", replay_args + ["--seed", seed]))
    if args.only:
        wanted = set(args.only.split(","))
        todo = [r for r in todo if r[0].split("/")[0] in wanted]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda r: run_one(args.sim, args.out, r[0], r[1], args.extra, args.reuse,
                                               SPOT_MIX_POLICIES), todo))
    by_replay = {}
    lines = [f"prices per GPU-hour: {SPOT_MIX_PRICES} (first-fit tries the pools in this order)", "",
             "| replay | seed | cost stint/first-fit ≤ 0.75 | mean JCT stint/first-fit ≤ 1 "
             "| p99 JCT stint/first-fit ≤ 1.2 | cost/job first-fit | cost/job stint "
             "| GPU-h on-prem, on-demand, spot: first-fit | stint | interrupts/job first-fit, stint "
             "| cheapest-only: cost, mean JCT, p99 JCT / first-fit | cost check | met |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|---|---|---|---|"]

    def pools(p):
        return ", ".join(f"{p['pools'].get(k, {}).get('gpu_h', 0):.0f}" for k in ("onprem", "ondemand", "spot"))

    for name, res in rows:
        replay, seed = name.split("/")
        p = res["policies"]
        ff, st, co = p["stint-first-fit"], p["stint"], p["stint-cheapest-only"]
        r = {"cost": ratio(st["cost_total"], ff["cost_total"]),
             "jct": ratio(st["jct_mean_s"], ff["jct_mean_s"]),
             "p99": ratio(st["jct_p99_s"], ff["jct_p99_s"]),
             "co_cost": ratio(co["cost_total"], ff["cost_total"]),
             "co_jct": ratio(co["jct_mean_s"], ff["jct_mean_s"]),
             "co_p99": ratio(co["jct_p99_s"], ff["jct_p99_s"])}
        oks = [r["cost"] <= 0.75, r["jct"] <= 1.0, r["p99"] <= 1.2]
        by_replay.setdefault(replay, []).append(r)
        gap = max(st["coordinator_cost_gap"], co["coordinator_cost_gap"])
        lines.append(
            f"| {replay} | {seed[4:]} | {check(r['cost'], oks[0])} | {check(r['jct'], oks[1])} "
            f"| {check(r['p99'], oks[2])} | {ff['cost_per_job']:.2f} | {st['cost_per_job']:.2f} "
            f"| {pools(ff)} | {pools(st)} | {ff['interrupts_per_job']:.3f}, {st['interrupts_per_job']:.3f} "
            f"| {r['co_cost']:.3f}, {r['co_jct']:.2f}, {r['co_p99']:.2f} "
            f"| {'≤ ' + format(gap, '.0e') if gap >= 0 else '-'} | {'met' if all(oks) else 'missed'} |")
    lines += ["", "Medians over the seeds:", "",
              "| replay | seeds | cost stint/first-fit ≤ 0.75 | mean JCT stint/first-fit ≤ 1 "
              "| p99 JCT stint/first-fit ≤ 1.2 | cheapest-only: cost, mean JCT, p99 JCT / first-fit | met |",
              "|---|---:|---:|---:|---:|---|---|"]
    everything = []
    for replay, rs in by_replay.items():
        everything += rs
        m = {k: median([r[k] for r in rs]) for k in rs[0]}
        oks = [m["cost"] <= 0.75, m["jct"] <= 1.0, m["p99"] <= 1.2]
        lines.append(f"| {replay} | {len(rs)} | {check(m['cost'], oks[0])} | {check(m['jct'], oks[1])} "
                      f"| {check(m['p99'], oks[2])} | {m['co_cost']:.3f}, {m['co_jct']:.2f}, {m['co_p99']:.2f} "
                      f"| {'met' if all(oks) else 'missed'} |")
    if everything:
        m = {k: median([r[k] for r in everything]) for k in everything[0]}
        oks = [m["cost"] <= 0.75, m["jct"] <= 1.0, m["p99"] <= 1.2]
        lines.append(f"| all | {len(everything)} | {check(m['cost'], oks[0])} | {check(m['jct'], oks[1])} "
                     f"| {check(m['p99'], oks[2])} | {m['co_cost']:.3f}, {m['co_jct']:.2f}, {m['co_p99']:.2f} "
                     f"| {'met' if all(oks) else 'missed'} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "spot-mix.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sim", default=os.path.join(root, "build/tools/stint-sim/stint-sim"))
    parser.add_argument("--traces", default=os.path.join(os.path.dirname(root), "shared/traces"))
    parser.add_argument("--data", default=os.path.join(root, "tests/data/traces"))
    parser.add_argument("--only", default="", help="comma-separated replay names (default: all)")
    parser.add_argument("--out", default="/tmp/stint-sweep")
    parser.add_argument("--jobs", type=int, default=2, help="replays run at once")
    parser.add_argument("--reuse", action="store_true",
                        help="tabulate the results.json already under --out instead of running again")
    parser.add_argument("--spot-mix", action="store_true",
                        help="the priced spot-mix replays over --seeds against first-fit (issue 33)")
    parser.add_argument("--seeds", default=SPOT_MIX_SEEDS, help="--spot-mix: comma-separated seeds")
    parser.add_argument("extra", nargs="*", help="more stint-sim options, after --")
    args = parser.parse_args()
    if args.spot_mix:
        return spot_mix_main(args)

    todo = replays(args.traces, args.data)
    if args.only:
        wanted = set(args.only.split(","))
        todo = [r for r in todo if r[0] in wanted]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda r: run_one(args.sim, args.out, r[0], r[1], args.extra, args.reuse), todo))

    lines = ["| replay | jobs | FIFO queue mean (h) | JCT stint/FIFO ≤ 0.5 (bound) | JCT stint/slurm ≤ 0.8 "
             "| p99 queue stint/EASY ≤ 0.5 (no queue guard) | p99 JCT stint/EASY ≤ 1.2 (no guard) "
             "| stint-las: JCT/FIFO, p99 JCT/EASY, p99 queue/EASY | window util ≥ 0.85 "
             "| lost GPU-h = 0 | Jain stint ≥ slurm | preempt/job (no shrink) | resizes/job | goodput | all met |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    met = 0
    team_lines = []
    for name, res in rows:
        p = res["policies"]
        fifo, easy, slurm, stint = p["fifo"], p["easy"], p["slurm"], p["stint"]
        jct = ratio(stint["jct_mean_s"], fifo["jct_mean_s"])
        # The lower bound on mean JCT: zero queueing, or (newer results) the
        # pooled capacity served shortest remaining first, whichever is larger.
        bound = ratio(res.get("jct_bound_s", res["work_mean_s"]), fifo["jct_mean_s"])
        jct_slurm = ratio(stint["jct_mean_s"], slurm["jct_mean_s"])
        q99 = ratio(stint["queue_p99_s"], easy["queue_p99_s"]) if easy["queue_p99_s"] > 0 else 0.0
        p99 = ratio(stint["jct_p99_s"], easy["jct_p99_s"])
        p99_las = ratio(p["stint-no-starvation-guard"]["jct_p99_s"], easy["jct_p99_s"])
        # Attained-service classes for every job (the policy before classes by the work left).
        las = p["stint-las"]
        las_cell = (f"{ratio(las['jct_mean_s'], fifo['jct_mean_s']):.3f}, {ratio(las['jct_p99_s'], easy['jct_p99_s']):.3f}, "
                    f"{ratio(las['queue_p99_s'], easy['queue_p99_s']) if easy['queue_p99_s'] > 0 else 0.0:.3f}")
        teams = len(stint["teams"]) > 1
        # With borrowing limits stint's fairness is compared with Slurm-like
        # under the same caps (slurm-limits, GrpTRES); unlimited Slurm-like's
        # is printed beside it.
        limited = any(t.get("borrow_limit_gpus", -1) >= 0 for t in stint["teams"].values())
        fair_base = p["slurm-limits"] if limited else slurm
        oks = [jct <= 0.5, jct_slurm <= 0.8, q99 <= 0.5, p99 <= 1.2, stint["window_util"] >= 0.85,
               stint["lost_gpu_h"] == 0, (stint["fairness_jain"] >= fair_base["fairness_jain"]) or not teams]
        nqg = p["stint-no-queue-guard"]
        q99_nqg = ratio(nqg["queue_p99_s"], easy["queue_p99_s"]) if easy["queue_p99_s"] > 0 else 0.0
        met += all(oks)
        lines.append(
            f"| {name} | {stint['jobs']} | {fifo['queue_mean_s'] / 3600:.2f} "
            f"| {check(jct, oks[0])} ({bound:.2f}) | {check(jct_slurm, oks[1])} | {check(q99, oks[2])} ({q99_nqg:.2f}) "
            f"| {check(p99, oks[3])} ({p99_las:.2f}) | {las_cell} | {check(stint['window_util'], oks[4])} "
            f"| {check(stint['lost_gpu_h'], oks[5], '{:.1f}')} "
            f"| {(check(stint['fairness_jain'], oks[6]) + ' vs ' + format(fair_base['fairness_jain'], '.3f') + (' (same limits; unlimited ' + format(slurm['fairness_jain'], '.3f') + ')' if limited else '')) if teams else '-'} "
            f"| {stint['preemptions_per_job']:.3f} ({p['stint-no-shrink']['preemptions_per_job']:.3f}) "
            f"| {stint['resizes_per_job']:.3f} "
            f"| {stint['goodput']:.4f} | {'met' if all(oks) else 'missed'} |")
        if teams:
            sl = p["slurm-limits"]
            team_lines += [f"\n{name}: per team (stint; Slurm-like without limits, slurm-limits with the same caps "
                           f"as GrpTRES). Jain over the teams' mean slowdown: stint {stint['fairness_jain']:.3f}, "
                           f"Slurm-like {slurm['fairness_jain']:.3f}, slurm-limits {sl['fairness_jain']:.3f}", "",
                           "| team | guarantee | borrow limit | jobs | GPUs held mean | peak (≤ guarantee + limit) "
                           "| borrowed mean | wait stint (h) | wait slurm (h) | wait slurm-limits (h) "
                           "| slowdown stint | slowdown slurm | slowdown slurm-limits |",
                           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for team, t in sorted(stint["teams"].items(), key=lambda kv: -kv[1]["guarantee_gpus"]):
                s = slurm["teams"][team]
                sl_t = sl["teams"][team]
                limit = t.get("borrow_limit_gpus", -1)
                cap = t["guarantee_gpus"] + limit if limit >= 0 else None
                peak = f"{t['gpus_peak']}" + ("" if cap is None else f" {'✓' if t['gpus_peak'] <= cap else '✗'}")
                team_lines.append(f"| {team} | {t['guarantee_gpus']} | {limit if limit >= 0 else 'none'} | {t['jobs']} "
                                  f"| {t['gpus_mean']:.1f} | {peak} | {t['borrowed_gpus_mean']:.2f} "
                                  f"| {t['queue_mean_s'] / 3600:.2f} | {s['queue_mean_s'] / 3600:.2f} "
                                  f"| {sl_t['queue_mean_s'] / 3600:.2f} "
                                  f"| {t['slowdown_mean']:.2f} | {s['slowdown_mean']:.2f} | {sl_t['slowdown_mean']:.2f} |")
    lines.append("")
    lines.append(f"all targets met in {met} of {len(rows)} replays")
    text = "\n".join(lines + team_lines) + "\n"
    with open(os.path.join(args.out, "sweep.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
