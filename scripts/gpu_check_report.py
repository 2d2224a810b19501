#!/usr/bin/env python3
"""The GPU check's bookkeeping (scripts/gpu_check_run.sh; packed as gpu_pack/report.py).
Standard library only: it runs under any python3, here and on the GPU machine.

    report.py record RESULTS SUMMARY_MD START BUDGET STEP STATUS FIGURES
                         one row: summary.md rewritten with it (atomically), then RESULTS
    report.py summary RESULTS SUMMARY_MD START BUDGET [LEDGER]
                         summary.md of every row; with the ledger: complete, with the plan
    report.py plan LEDGER BUDGET                     the planned seconds against the budget
    report.py close A.jsonl B.jsonl RTOL             loss curves (metrics.jsonl) within RTOL
    report.py identical A.jsonl B.jsonl              loss curves bit-identical
    report.py gtest LOG BINARY                       "N tests, M failed: names" of one run
    report.py kiln-bench LOG PRESET CEILING MEMFILE RESULTS   figures of kiln's bench row
    report.py first-loss LOG PRESET                  the first step's loss against ln(V)
    report.py phases LOG PRESET CEILING_TFLOPS BANDWIDTH_GBS  each phase against its roofline
    report.py torch-bench LOG PRESET RESULTS         PyTorch's figures and kiln/PyTorch ratio

The comparisons print one line starting with "ok" or "FAIL" and exit 0 either way.
START is the run's start (seconds since the epoch), BUDGET its budget in seconds; LEDGER holds
one planned command per line: expected seconds, cap seconds, what.
"""

import json
import math
import os
import re
import sys
import time


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


def read_rows(results):
    try:
        rows = [json.loads(l) for l in open(results) if l.strip()]
    except OSError:
        return []
    return [r for r in rows if r["kind"] == "row"]


def record(results, md, start, budget, step, status, figures):
    """The summary with the new row first (a kill between the two leaves it in summary.md)."""
    row = {"kind": "row", "step": step, "status": status, "figures": figures}
    write_summary(read_rows(results) + [row], md, start, budget, None)
    append(results, row)


def planned(ledger):
    """(expected seconds, cap seconds, commands) of the ledger."""
    expected = cap = n = 0
    for line in open(ledger):
        parts = line.split()
        if len(parts) >= 2:
            expected += float(parts[0])
            cap += float(parts[1])
            n += 1
    return expected, cap, n


def plan(ledger, budget):
    expected, cap, n = planned(ledger)
    verdict = "ok" if expected <= float(budget) else "FAIL"
    print(
        f"{verdict}: {n} commands planned, {expected:.0f} s expected of the {float(budget):.0f} s "
        f"budget (caps {cap:.0f} s; every command also stops at the budget)"
    )


def peak_mib(path):
    try:
        vals = [float(x) for x in open(path).read().split() if x.replace(".", "").isdigit()]
    except OSError:
        return None
    return max(vals) if vals else None


def bench_runs(log, preset):
    """kiln bench train's runs of PRESET in LOG: (row fields, first-loss line, phase lines)."""
    runs, loss, phases = [], None, []
    for line in open(log, errors="replace"):
        if line.startswith("  first_loss "):
            loss, phases = line.split(), []
        elif line.startswith("  phase "):
            phases.append(line.split())
        elif line.startswith(preset + " ") and re.match(r"[\d.]+M(/[\d.]+M)?$", (line.split() + ["", ""])[1]):
            runs.append((line.split(), loss, phases))
            loss, phases = None, []
    return runs


def kiln_bench(log, preset, ceiling, memfile, results):
    """kiln bench train's row: shape params BxT type rcmp step_s tokens/s GFLOP/s peak rss ..."""
    runs = bench_runs(log, preset)
    if not runs:
        print("no result row")
        return
    r = runs[-1][0]
    step_s, tps, gflops, rss = float(r[5]), float(r[6]), float(r[7]), float(r[9])
    dev_mib = float(r[13]) if len(r) > 13 else 0.0
    tflops = gflops / 1000.0
    ceiling = float(ceiling)
    mfu = tflops / ceiling if ceiling > 0 else None
    mem = peak_mib(memfile)
    append(results, {"kind": "kiln", "preset": preset, "tokens_per_s": tps, "tflops": tflops})
    tf = f"{tflops:.1f}" if tflops >= 1 else f"{tflops:.2g}"
    figs = [f"{tps:,.0f} tokens/s", f"step {step_s:.3f} s", f"{tf} TFLOP/s"]
    if mfu:
        figs.append(f"MFU {100 * mfu:.1f}% of the {ceiling:.0f} ceiling")
    else:
        figs.append("MFU n/a (no ceiling)")
    if len(r) > 8:
        figs.append(f"{r[8]} of the device's peak")
    figs.append(f"GPU mem peak {mem / 1024:.1f} GiB (nvidia-smi)" if mem else f"RSS {rss:.0f} MiB")
    figs.append(f"backend's peak {dev_mib / 1024:.2f} GiB (scratch included)")
    print("; ".join(figs))


def first_loss(log, preset):
    """ok when the first step's loss is finite and within 10% of ln(V) (an untrained model)."""
    runs = bench_runs(log, preset)
    if not runs or runs[-1][1] is None:
        print("FAIL: no first_loss line")
        return
    loss, ln_v = float(runs[-1][1][1]), float(runs[-1][1][3])
    ok = math.isfinite(loss) and abs(loss - ln_v) <= 0.1 * ln_v
    print(f"{'ok' if ok else 'FAIL'}: first loss {loss:.4f} (ln V {ln_v:.4f})")


def phases(log, preset, ceiling_tflops, bandwidth_gbs):
    """Each phase's measured time beside max(FLOPs / ceiling, bytes / bandwidth)."""
    runs = bench_runs(log, preset)
    if not runs or not runs[-1][2]:
        print("no phase lines")
        return
    ceiling, bw = float(ceiling_tflops) * 1e12, float(bandwidth_gbs) * 1e9
    figs = []
    for p in runs[-1][2]:  # phase NAME SECONDS s FLOPS flop BYTES bytes
        name, secs, flop, nbytes = p[1], float(p[2]), float(p[4]), float(p[6])
        if ceiling > 0 and bw > 0:
            roof = max(flop / ceiling, nbytes / bw)
            bound = "compute" if flop / ceiling >= nbytes / bw else "memory"
            ratio = f", {secs / roof:.1f}x" if roof > 0 else ""
            figs.append(f"{name} {1e3 * secs:.1f} ms vs {1e3 * roof:.1f} ms {bound}-bound{ratio}")
        else:
            figs.append(f"{name} {1e3 * secs:.1f} ms")
    tail = "" if ceiling > 0 and bw > 0 else " (no ceiling or bandwidth measured: no roofline)"
    print("; ".join(figs) + tail)


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


def dpo_bench(log):
    """kiln bench dpo's row: the SFT step's tokens/s, the DPO steps' ratios and the peak memory
    beside issue 38's goals (1.45x live, 1.1x precomputed, 1.1x memory with LoRA)."""
    text = open(log, errors="replace").read()
    shape = re.search(r"bench dpo: \S+, (\d+) pairs \((\d+) rows\) x (\d+) tokens", text)
    step = re.search(
        r"step ms \(median of \d+\): sft ([\d.]+), dpo live reference ([\d.]+) \(([\d.]+)x\), "
        r"dpo precomputed reference ([\d.]+) \(([\d.]+)x\)",
        text,
    )
    if not shape or not step:
        print("FAIL: no step line")
        return
    tokens = int(shape.group(2)) * int(shape.group(3))
    sft_ms = float(step.group(1))
    figs = [
        f"SFT {tokens / sft_ms * 1000:,.0f} tokens/s (step {sft_ms:.1f} ms)",
        f"DPO live reference {step.group(3)}x (goal 1.45)",
        f"precomputed {step.group(5)}x (goal 1.1)",
    ]
    mem = re.search(r"peak memory MiB [^:]*: sft ([\d.]+), dpo ([\d.]+) \(([\d.]+)x\)", text)
    figs.append(
        f"peak {mem.group(1)} / {mem.group(2)} MiB, {mem.group(3)}x (goal 1.1)" if mem else "no peak line"
    )
    print("; ".join(figs))


def write_summary(rows, md, start, budget, ledger):
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    seconds = int(time.time() - float(start))
    lines = ["# kiln GPU check", ""]
    if ledger is None:
        lines.append(
            "**In progress** (rewritten after every row: if the run was cut, the last row is the "
            "last thing that finished)."
        )
    else:
        expected, _, n = planned(ledger)
        lines.append(f"Complete. Planned: {n} commands, {expected:.0f} s expected.")
    lines += [
        "",
        f"{len(rows)} rows in {seconds} s of the {float(budget):.0f} s budget: "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
        "",
        "| step | status | key figures |",
        "| --- | --- | --- |",
    ]
    for r in rows:
        figures = r["figures"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['step']} | {r['status']} | {figures} |")
    tmp = md + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, md)


def summary(results, md, start, budget, ledger=None):
    write_summary(read_rows(results), md, start, budget, ledger)
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
        "first-loss": first_loss,
        "phases": phases,
        "plan": plan,
        "torch-bench": torch_bench,
        "dpo-bench": dpo_bench,
    }
    if cmd not in commands:
        raise SystemExit(f"report.py: unknown command {cmd} ({', '.join(commands)})")
    commands[cmd](*args)


if __name__ == "__main__":
    main()
