#!/usr/bin/env python3
"""Replays the Philly VC traces at several cluster sizes through stint-sim and
prints one Markdown table of the issue's target ratios per replay.

Every row is one deterministic stint-sim run (same inputs, same numbers), so
there is nothing to take a median of; the spread that matters is across
traces and loads, which is what the rows are.

  tools/stint-sim/sweep.py --sim build/tools/stint-sim/stint-sim --out /tmp/sweep
  tools/stint-sim/sweep.py --configs ee9e8c:32,ee9e8c:48 --jobs 2

Columns: FIFO's mean queue delay (the load), mean JCT of EASY / Slurm-like /
stint / stint without attained-service classes normalised to FIFO, stint's
p99 queue delay divided by FIFO+EASY's, stint's window utilisation, stint's
p99 JCT divided by EASY's (the cost LAS puts on the longest jobs), stint's
preemptions per job and goodput, and whether the target (JCT <= 0.5 FIFO,
p99 queue <= 0.5 EASY, window util >= 0.85) is met.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

DEFAULT_CONFIGS = ("ee9e8c:32,ee9e8c:48,ee9e8c:64,11cb48:24,11cb48:32,6c71a0:48,6c71a0:64,"
                   "6214e9:24,6214e9:64,7f04ca:16,e13805:16,2869ce:16,0e4a51:16")
POLICIES = "fifo,easy,slurm,stint,stint-no-service,stint-no-service-preemption"


def run_one(sim, traces, out, config, extra):
    vc, gpus = config.split(":")
    out_dir = os.path.join(out, f"{vc}-{gpus}")
    os.makedirs(out_dir, exist_ok=True)
    cmd = [sim, "--trace", f"philly:{traces}/philly-gavel-msr-seed0/{vc}.trace", "--max-work-h", "48",
           "--capacity", f"helios:{traces}/helios-venus/cluster_gpu_number.csv:total:{gpus}",
           "--policies", POLICIES, "--out", out_dir] + extra
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-2000:]}")
    with open(os.path.join(out_dir, "results.json")) as f:
        return vc, int(gpus), json.load(f)["policies"]


def ratio(a, b):
    return a / b if b > 0 else float("nan")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sim", default=os.path.join(root, "build/tools/stint-sim/stint-sim"))
    parser.add_argument("--traces", default=os.path.join(os.path.dirname(root), "shared/traces"))
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="VC:GPUS,... (Helios capacity scaled to GPUS)")
    parser.add_argument("--out", default="/tmp/stint-sweep")
    parser.add_argument("--jobs", type=int, default=2, help="replays run at once")
    parser.add_argument("extra", nargs="*", help="more stint-sim options, after --")
    args = parser.parse_args()

    configs = [c for c in args.configs.split(",") if c]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda c: run_one(args.sim, args.traces, args.out, c, args.extra), configs))

    lines = ["| trace | GPUs | jobs | FIFO queue mean (h) | JCT easy/FIFO | JCT slurm/FIFO | JCT stint/FIFO "
             "| JCT stint-no-service/FIFO | p99 queue stint/EASY | window util stint | p99 JCT stint/EASY "
             "| preempt/job | goodput | target |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    met = 0
    for vc, gpus, p in rows:
        fifo, easy, stint = p["fifo"], p["easy"], p["stint"]
        jct = ratio(stint["jct_mean_s"], fifo["jct_mean_s"])
        q99 = ratio(stint["queue_p99_s"], easy["queue_p99_s"])
        ok = jct <= 0.5 and q99 <= 0.5 and stint["window_util"] >= 0.85
        met += ok
        lines.append(
            f"| {vc} | {gpus} | {stint['jobs']} | {fifo['queue_mean_s'] / 3600:.2f} "
            f"| {ratio(easy['jct_mean_s'], fifo['jct_mean_s']):.3f} "
            f"| {ratio(p['slurm']['jct_mean_s'], fifo['jct_mean_s']):.3f} | {jct:.3f} "
            f"| {ratio(p['stint-no-service']['jct_mean_s'], fifo['jct_mean_s']):.3f} | {q99:.3f} "
            f"| {stint['window_util']:.3f} | {ratio(stint['jct_p99_s'], easy['jct_p99_s']):.3f} "
            f"| {stint['preemptions_per_job']:.3f} | {stint['goodput']:.4f} | {'met' if ok else 'missed'} |")
    lines.append("")
    lines.append(f"target met in {met} of {len(rows)} replays")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "sweep.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
