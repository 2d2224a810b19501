#!/usr/bin/env python3
"""The GPU check's bookkeeping (scripts/gpu_check_run.sh; packed as gpu_pack/report.py).
Standard library only: it runs under any python3, here and on the GPU machine.

    report.py record RESULTS STEP STATUS FIGURES     one row of the summary (JSON line)
    report.py summary RESULTS SUMMARY_MD SECONDS     summary.md: the table of every row
    report.py close A.jsonl B.jsonl RTOL             loss curves (metrics.jsonl) within RTOL
    report.py identical A.jsonl B.jsonl              loss curves bit-identical
    report.py gtest LOG BINARY                       "N tests, M failed: names" of one run
    report.py kiln-bench LOG PRESET CEILING MEMFILE RESULTS   figures of kiln's bench row
    report.py torch-bench LOG PRESET RESULTS         PyTorch's figures and kiln/PyTorch ratio

The comparisons print one line starting with "ok" or "FAIL" and exit 0 either way.
"""

import json
import re
import sys


def losses(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    row = json.loads(line)
                    if "loss" in row:
                        out.append((row["step"], row["loss"]))
    except OSError as e:
        raise SystemExit(f"FAIL: {path}: {e.strerror}")
    if not out:
        raise SystemExit(f"FAIL: {path}: no loss rows")
    return out


def close(a_path, b_path, rtol):
    a, b = losses(a_path), losses(b_path)
    if [s for s, _ in a] != [s for s, _ in b]:
        print(f"FAIL: steps differ ({len(a)} vs {len(b)} rows)")
        return
    worst, at = 0.0, 0
    for (s, x), (_, y) in zip(a, b):
        rel = abs(x - y) / max(abs(x), 1e-12)
        if rel > worst:
            worst, at = rel, s
    verdict = "ok" if worst <= float(rtol) else "FAIL"
    print(
        f"{verdict}: {len(a)} steps, loss {a[0][1]:.4f}->{a[-1][1]:.4f} vs "
        f"{b[0][1]:.4f}->{b[-1][1]:.4f}, max rel diff {worst:.2e} at step {at} (tol {rtol})"
    )


def identical(a_path, b_path):
    a, b = losses(a_path), losses(b_path)
    diff = [s for (s, x), (t, y) in zip(a, b) if s != t or x != y]
    if len(a) != len(b) or diff:
        first = diff[0] if diff else min(len(a), len(b))
        print(f"FAIL: {len(a)} vs {len(b)} steps, first difference at step {first}")
    else:
        print(f"ok: {len(a)} steps bit-identical (last loss {a[-1][1]!r})")


def gtest(log, binary):
    """The last run of BINARY in LOG: gtest's counts and failed tests."""
    text = open(log, errors="replace").read()
    marker = text.rfind("/" + binary + " --gtest")
    section = text[marker:] if marker >= 0 else ""
    end = section.find("\n$ ")
    section = section[: end if end >= 0 else len(section)]
    ran = re.findall(r"\[==========\] (\d+) tests? from .* ran", section)
    passed = re.findall(r"\[  PASSED  \] (\d+) test", section)
    skipped = re.findall(r"\[  SKIPPED \] (\d+) test", section)
    failed = [n for n in re.findall(r"\[  FAILED  \] ([\w/.]+)", section) if "." in n]
    parts = [f"{ran[-1] if ran else '?'} tests", f"{passed[-1] if passed else 0} passed"]
    if skipped:
        parts.append(f"{skipped[-1]} skipped")
    if failed:
        names = sorted(set(failed))
        parts.append(f"{len(names)} failed: " + ", ".join(names[:6]))
    if "(timed out after" in section:
        parts.append("timed out")
    print("; ".join(parts))


def append(results, row):
    with open(results, "a") as f:
        f.write(json.dumps(row) + "\n")


def record(results, step, status, figures):
    append(results, {"kind": "row", "step": step, "status": status, "figures": figures})


def peak_mib(path):
    try:
        vals = [float(x) for x in open(path).read().split() if x.replace(".", "").isdigit()]
    except OSError:
        return None
    return max(vals) if vals else None


def kiln_bench(log, preset, ceiling, memfile, results):
    """kiln bench train's row: shape params BxT type rcmp step_s tokens/s GFLOP/s peak rss ..."""
    rows = [
        l.split()
        for l in open(log, errors="replace")
        if l.startswith(preset + " ") and re.match(r"[\d.]+M$", (l.split() + ["", ""])[1])
    ]
    if not rows:
        print("no result row")
        return
    r = rows[-1]
    step_s, tps, gflops, rss = float(r[5]), float(r[6]), float(r[7]), float(r[9])
    tflops = gflops / 1000.0
    ceiling = float(ceiling)
    mfu = tflops / ceiling if ceiling > 0 else None
    mem = peak_mib(memfile)
    append(results, {"kind": "kiln", "preset": preset, "tokens_per_s": tps, "tflops": tflops})
    tf = f"{tflops:.1f}" if tflops >= 1 else f"{tflops:.2g}"
    figs = [f"{tps:,.0f} tokens/s", f"step {step_s:.3f} s", f"{tf} TFLOP/s"]
    figs.append(f"MFU {100 * mfu:.1f}% of {ceiling:.0f}" if mfu else "MFU n/a (no ceiling)")
    figs.append(f"GPU mem peak {mem / 1024:.1f} GiB (nvidia-smi)" if mem else f"RSS {rss:.0f} MiB")
    if len(r) >= 20:  # time per phase of one profiled step
        names = ["gemm", "lm_head", "attention", "optimizer", "other"]
        figs.append("phases " + " ".join(f"{n} {r[14 + i]}%" for i, n in enumerate(names)))
    print("; ".join(figs))


def torch_bench(log, preset, results):
    rows = []
    for line in open(log, errors="replace"):
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("preset") == preset:
                rows.append(row)
    if not rows:
        print("no JSON result")
        return
    t = rows[-1]
    figs = [f"{t['tokens_per_s']:,.0f} tokens/s", f"{t['tflops']:.1f} TFLOP/s"]
    if t.get("mfu"):
        figs.append(f"MFU {100 * t['mfu']:.1f}%")
    figs.append(f"peak {t['peak_mem_gib']:.1f} GiB (max_memory_allocated)")
    kiln = [
        json.loads(l)
        for l in open(results)
        if '"kind": "kiln"' in l and json.loads(l)["preset"] == preset
    ]
    if kiln:
        figs.append(f"kiln/PyTorch {kiln[-1]['tokens_per_s'] / t['tokens_per_s']:.2f}x")
    figs.append(f"torch {t['torch']}")
    print("; ".join(figs))


def summary(results, md, seconds):
    rows = [json.loads(l) for l in open(results) if l.strip()]
    rows = [r for r in rows if r["kind"] == "row"]
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    with open(md, "w") as f:
        f.write("# kiln GPU check\n\n")
        f.write(
            f"{len(rows)} rows in {seconds} s: "
            + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            + "\n\n| step | status | key figures |\n| --- | --- | --- |\n"
        )
        for r in rows:
            figures = r["figures"].replace("|", "\\|").replace("\n", " ")
            f.write(f"| {r['step']} | {r['status']} | {figures} |\n")
    print(open(md).read())


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    commands = {
        "record": record,
        "summary": summary,
        "close": close,
        "identical": identical,
        "gtest": gtest,
        "kiln-bench": kiln_bench,
        "torch-bench": torch_bench,
    }
    if cmd not in commands:
        raise SystemExit(f"report.py: unknown command {cmd} ({', '.join(commands)})")
    commands[cmd](*args)


if __name__ == "__main__":
    main()
