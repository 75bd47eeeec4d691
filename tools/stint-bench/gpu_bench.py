#!/usr/bin/env python3
"""GPU benchmark of stint's CUDA checkpoint path through PyTorch (not a test):

  (a) snapshot bandwidth: a stint save() of CUDA tensors until its `staged`
      future is done (D2H into pinned staging on copy streams), against the
      ceiling: pinned D2H copies made with torch (dst.copy_(src,
      non_blocking=True) into pinned tensors, then synchronize). Ratio target
      >= 0.8 (as stint-cuda-bench's, which measures the same at the C++ level
      against cudaMemcpyAsync).
  (b) training-step time with a checkpoint every k steps / without, on a real
      PyTorch model of >= --model-gb of state (parameters + AdamW moments):
      stint lazy with attach(model, optimizer), stint eager, and a
      synchronous torch.save (+ fsync) of the same state for reference. Also
      the time each adds per checkpoint, and stint's / torch.save's.
  (c) time to durable: save() until the `durable` future is done (committed
      and fsynced), for (a)'s state and the model's.

Prints medians and ratios and writes one JSON object to --json (default:
$OUT/gpu_bench.json when $OUT is set). Exit status: 0 measured (targets are
reported, not enforced: see "targets" in the JSON), 77 no usable CUDA device
(nothing measured; the JSON says why), 2 stint or torch not importable,
1 a measurement failed.

  gpu_bench.py --root /nvme/bench [--state-gb 4] [--model-gb 2.2] [--every 0]

stint is imported from $STINT_PYTHON_PATH when set (a build tree's
python_bindings/ folder), else from the environment.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=None,
                   help="directory for checkpoints (the disk under test); default: a temp dir")
    p.add_argument("--state-gb", type=float, default=4.0, help="(a): GiB of CUDA tensors")
    p.add_argument("--tensors", type=int, default=32, help="(a): number of tensors")
    p.add_argument("--reps", type=int, default=3, help="(a): warm repetitions (median)")
    p.add_argument("--model-gb", type=float, default=2.2,
                   help="(b): GiB of model state (fp32 parameters + AdamW moments), at least")
    p.add_argument("--width", type=int, default=2048, help="(b): model width d (MLP blocks d->4d->d)")
    p.add_argument("--batch", type=int, default=4096, help="(b): rows per step")
    p.add_argument("--every", type=int, default=0,
                   help="(b): checkpoint every k steps; 0: long enough for one save to become "
                        "durable before the next (measured), at least 5")
    p.add_argument("--checkpoints", type=int, default=3, help="(b): checkpoints per configuration")
    p.add_argument("--skip-torch-save", action="store_true", help="(b): no torch.save reference")
    p.add_argument("--cpu-plumbing", action="store_true",
                   help="check this script without a GPU: CPU tensors, no pinning, tiny sizes "
                        "unless given; the figures mean nothing")
    p.add_argument("--json", default=None, help="write the results here (default: $OUT/gpu_bench.json)")
    return p.parse_args(argv)


DEVICE = "cuda"  # "cpu" with --cpu-plumbing


def sync(torch):
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def empty_cache(torch):
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def gb(nbytes):
    return nbytes / 1e9


class Results:
    def __init__(self, path):
        self.path = path
        self.data = {"bench": "gpu_bench", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def write(self):
        if not self.path:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "w") as f:
            json.dump(self.data, f, indent=2, sort_keys=True)
            f.write("\n")
        print("gpu_bench: wrote %s" % self.path)


# ---- (a) snapshot bandwidth ---------------------------------------------------------


def bench_snapshot(torch, stint, root, args):
    per = int(args.state_gb * 2**30 / args.tensors) // 4 // 4096 * 4096  # float32 elements
    tensors = [torch.empty(per, dtype=torch.float32, device=DEVICE).normal_()
               for _ in range(args.tensors)]
    total = per * 4 * len(tensors)
    sync(torch)

    # The ceiling: pinned D2H with torch, the same tensors, the current stream.
    pinned = [torch.empty(per, dtype=torch.float32, pin_memory=DEVICE == "cuda")
              for _ in tensors]
    memcpy = []
    for rep in range(args.reps + 1):
        sync(torch)
        t = time.perf_counter()
        for dst, src in zip(pinned, tensors):
            dst.copy_(src, non_blocking=True)
        sync(torch)
        if rep > 0:  # the first one warms up
            memcpy.append(time.perf_counter() - t)
    assert torch.equal(pinned[-1][:1024], tensors[-1][:1024].cpu())
    del pinned

    state = {"t%03d" % i: t for i, t in enumerate(tensors)}
    calls, staged, durable, device_copy = [], [], [], []
    cold = {}
    with stint.Checkpointer(os.path.join(root, "snapshot"), keep_last=1, snapshot="lazy") as ckpt:
        for rep in range(args.reps + 1):
            sync(torch)
            t = time.perf_counter()
            h = ckpt.save(rep + 1, state)
            call = time.perf_counter() - t
            h.staged.result(timeout=600)
            s = time.perf_counter() - t
            h.durable.result(timeout=600)
            d = time.perf_counter() - t
            last = ckpt.stats().get("last") or {}
            if rep == 0:  # maps and pins the staging buffers
                cold = {"call_s": call, "staged_s": s, "durable_s": d}
                continue
            calls.append(call)
            staged.append(s)
            durable.append(d)
            if last.get("device_copy_seconds"):
                device_copy.append(last["device_copy_seconds"])
    del state, tensors
    empty_cache(torch)
    memcpy_gbs = gb(total) / median(memcpy)
    staged_gbs = gb(total) / median(staged)
    out = {
        "bytes": total,
        "tensors": args.tensors,
        "pinned_d2h_gbs": memcpy_gbs,
        "pinned_d2h_s": memcpy,
        "stint_staged_gbs": staged_gbs,
        "stint_staged_s": staged,
        "stint_device_copy_gbs": gb(total) / median(device_copy) if device_copy else None,
        "stint_save_call_s": calls,
        "ratio": staged_gbs / memcpy_gbs,
        "durable_s": durable,
        "cold": cold,
    }
    print("(a) snapshot of %.2f GB in %d CUDA tensors" % (gb(total), args.tensors))
    print("    pinned D2H (torch, non_blocking)   %6.1f GB/s  (median of %d)" % (memcpy_gbs, len(memcpy)))
    print("    stint save() until staged          %6.1f GB/s  (save() call %.4f s)"
          % (staged_gbs, median(calls)))
    if device_copy:
        print("    stint device copies (stats)        %6.1f GB/s" % out["stint_device_copy_gbs"])
    print("    ratio                              %6.2f   target >= 0.80  %s"
          % (out["ratio"], "PASS" if out["ratio"] >= 0.8 else "MISS"))
    print("(c) time to durable, %.2f GB          %6.2f s  (cold first save %.2f s)"
          % (gb(total), median(durable), cold.get("durable_s", float("nan"))))
    return out


# ---- (b) training with checkpoints --------------------------------------------------


def make_model(torch, args):
    d = args.width
    per_block = 8 * d * d + 5 * d + 2 * d  # two Linear layers and a LayerNorm
    blocks = max(1, math.ceil(args.model_gb * 2**30 / (3 * 4 * per_block)))
    layers = [torch.nn.BatchNorm1d(d)]  # buffers the forward pass writes
    for _ in range(blocks):
        layers += [torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d),
                   torch.nn.LayerNorm(d)]
    layers.append(torch.nn.Linear(d, 1))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*layers).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    return model, opt, blocks


def state_bytes(torch, model, opt):
    n = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    for s in opt.state_dict()["state"].values():
        n += sum(v.numel() * v.element_size() for v in s.values() if isinstance(v, torch.Tensor))
    return n


def run_loop(torch, model, opt, x, y, steps, checkpoint=None):
    """`steps` synchronized training steps; checkpoint(step) after the optimizer
    step of every k-th. Returns the per-step wall times."""
    times = []
    for step in range(1, steps + 1):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if checkpoint is not None:
            checkpoint(step)
        sync(torch)
        times.append(time.perf_counter() - t)
    return times


def is_checkpoint_step(step, every):
    """Checkpoints at steps 1, 1 + k, 1 + 2k, ...: each is followed by k - 1
    steps inside the loop, so a lazy save's later barriers are counted."""
    return every > 0 and (step - 1) % every == 0


def summarize(name, times, every, base_mean, base_median, n_ckpt):
    ckpt_steps = [t for i, t in enumerate(times, 1) if is_checkpoint_step(i, every)]
    # The lazy barrier shows in the step after a save: count every step.
    added = (sum(times) - base_median * len(times)) / n_ckpt if n_ckpt else 0.0
    return {
        "config": name,
        "steps": len(times),
        "step_median_s": median(times),
        "step_mean_s": sum(times) / len(times),
        "checkpoint_step_median_s": median(ckpt_steps) if ckpt_steps else None,
        "ratio_mean_step": (sum(times) / len(times)) / base_mean,
        "added_per_checkpoint_s": added,
        "times_s": times,
    }


def bench_training(torch, stint, root, args):
    model, opt, blocks = make_model(torch, args)
    g = torch.Generator(device=DEVICE).manual_seed(1)
    x = torch.randn(args.batch, args.width, device=DEVICE, generator=g)
    y = torch.randn(args.batch, 1, device=DEVICE, generator=g)
    run_loop(torch, model, opt, x, y, 3)  # AdamW state exists from here on
    nbytes = state_bytes(torch, model, opt)
    print("(b) model: %d MLP blocks of width %d, %.2f GB of state (params + AdamW), batch %d"
          % (blocks, args.width, gb(nbytes), args.batch))

    def state():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    out = {"blocks": blocks, "width": args.width, "batch": args.batch, "state_bytes": nbytes}
    base = run_loop(torch, model, opt, x, y, 10)
    step_s = median(base)

    # stint, lazy through attach(): the cold first save also pins the staging
    # buffers; its time to durable sets k (unless --every).
    ckpt = stint.Checkpointer(os.path.join(root, "lazy"), keep_last=1)
    ckpt.attach(model, opt)
    t = time.perf_counter()
    h = ckpt.save(1, state())
    h.durable.result(timeout=600)
    cold_durable = time.perf_counter() - t
    t = time.perf_counter()
    h = ckpt.save(2, state())
    call = time.perf_counter() - t
    h.durable.result(timeout=600)
    warm_durable = time.perf_counter() - t
    every = args.every or max(5, math.ceil(1.3 * warm_durable / step_s))
    steps = every * args.checkpoints
    print("    step %.3f s without checkpoints; checkpoint every %d steps, %d steps per configuration"
          % (step_s, every, steps))
    out.update(every=every, steps=steps)

    ckpt.detach()  # the baseline runs without the hooks
    base = run_loop(torch, model, opt, x, y, steps)
    base_mean = sum(base) / len(base)
    base_median = median(base)
    configs = [summarize("none", base, 0, base_mean, base_median, 0)]

    durable_lazy = []

    def lazy_save(step):
        if is_checkpoint_step(step, every):
            t0 = time.perf_counter()
            h = ckpt.save(100 + step, state())
            pending.append((h, t0))
        for h, t0 in list(pending):
            if h.durable.done():
                durable_lazy.append(time.perf_counter() - t0)  # to the step's granularity
                pending.remove((h, t0))

    pending = []
    ckpt.attach(model, opt)
    lazy = run_loop(torch, model, opt, x, y, steps, lazy_save)
    ckpt.flush()
    ckpt.detach()
    ckpt.close()
    configs.append(summarize("stint_lazy_attach", lazy, every, base_mean, base_median, args.checkpoints))

    with stint.Checkpointer(os.path.join(root, "eager"), keep_last=1, snapshot="eager") as eager_ckpt:
        eager_ckpt.save(1, state()).durable.result(timeout=600)  # pins its staging

        def eager_save(step):
            if is_checkpoint_step(step, every):
                eager_ckpt.save(100 + step, state())

        eager = run_loop(torch, model, opt, x, y, steps, eager_save)
        eager_ckpt.flush()
    configs.append(summarize("stint_eager", eager, every, base_mean, base_median, args.checkpoints))

    torch_save_s = []
    if not args.skip_torch_save:
        path = os.path.join(root, "torch_save.pt")

        def torch_save(step):
            if is_checkpoint_step(step, every):
                t0 = time.perf_counter()
                with open(path, "wb") as f:
                    torch.save(state(), f)
                    f.flush()
                    os.fsync(f.fileno())
                torch_save_s.append(time.perf_counter() - t0)

        ts = run_loop(torch, model, opt, x, y, steps, torch_save)
        os.remove(path)
        configs.append(summarize("torch_save_fsync", ts, every, base_mean, base_median, args.checkpoints))

    out["configs"] = configs
    out["stint_save_call_s"] = call
    out["durable_s"] = {"cold": cold_durable, "warm": warm_durable,
                        "lazy_in_loop": durable_lazy}
    out["torch_save_s"] = torch_save_s
    by = {c["config"]: c for c in configs}
    lazy_added = by["stint_lazy_attach"]["added_per_checkpoint_s"]
    if torch_save_s:
        out["lazy_added_over_torch_save"] = lazy_added / median(torch_save_s)
    print("    %-20s %10s %10s %12s %14s" % ("config", "median s", "mean s", "ratio(mean)",
                                              "added/ckpt s"))
    for c in configs:
        print("    %-20s %10.4f %10.4f %12.3f %14.4f" % (
            c["config"], c["step_median_s"], c["step_mean_s"], c["ratio_mean_step"],
            c["added_per_checkpoint_s"]))
    if torch_save_s:
        print("    torch.save + fsync   %.2f s per checkpoint (median); stint lazy adds %.4f of it"
              % (median(torch_save_s), out["lazy_added_over_torch_save"]))
    print("(c) time to durable, %.2f GB model state  %.2f s warm (%.2f s cold, first save)"
          % (gb(nbytes), warm_durable, cold_durable))
    del model, opt, x, y
    empty_cache(torch)
    return out


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    json_path = args.json
    if json_path is None and os.environ.get("OUT"):
        json_path = os.path.join(os.environ["OUT"], "gpu_bench.json")
    results = Results(json_path)

    path = os.environ.get("STINT_PYTHON_PATH")
    if path:
        sys.path.insert(0, path)
    try:
        import torch
        import stint
    except ImportError as e:
        print("gpu_bench: cannot import torch and stint (%s); set STINT_PYTHON_PATH to a build's "
              "python_bindings/ folder" % e, file=sys.stderr)
        results.data["error"] = str(e)
        results.write()
        return 2
    results.data["torch"] = torch.__version__
    global DEVICE
    if args.cpu_plumbing:
        DEVICE = "cpu"
        for name, small in (("state_gb", 0.01), ("model_gb", 0.01), ("width", 64), ("batch", 32),
                            ("every", 4), ("tensors", 4)):
            if getattr(args, name) == parse_args([]).__dict__[name]:
                setattr(args, name, small)
        results.data["cpu_plumbing"] = True
        print("gpu_bench: --cpu-plumbing: CPU tensors, tiny sizes; the figures mean nothing")
    elif not torch.cuda.is_available():
        reason = "no CUDA device: torch.cuda.is_available() is False (torch %s, CUDA %s)" % (
            torch.__version__, torch.version.cuda)
        print("gpu_bench: skipped: " + reason)
        results.data["skipped"] = reason
        results.write()
        return 77
    results.data["device"] = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu"
    results.data["stint"] = os.path.dirname(stint.__file__)
    print("gpu_bench: %s, torch %s, stint from %s" % (results.data["device"], torch.__version__,
                                                      results.data["stint"]))

    made_root = args.root is None
    if made_root:
        import tempfile
        root = tempfile.mkdtemp(prefix="stint-gpu-bench-")
    else:
        root = args.root
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
    status = 0
    try:
        results.data["snapshot"] = bench_snapshot(torch, stint, root, args)
        results.data["training"] = bench_training(torch, stint, root, args)
        snap = results.data["snapshot"]
        results.data["targets"] = {"snapshot_ratio>=0.8": snap["ratio"] >= 0.8}
    except Exception as e:  # report what was measured so far
        import traceback
        traceback.print_exc()
        results.data["error"] = "%s: %s" % (type(e).__name__, e)
        status = 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
        results.write()
    return status


if __name__ == "__main__":
    sys.exit(main())
