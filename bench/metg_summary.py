#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""METG(50%) from bench/metg.sh's raw JSON lines: per pattern and width, each runtime's METG per
pass (the smallest task time whose efficiency is >= 0.5, interpolated in log size with the size
below it), its median, min and max over passes, the per-pass ratio StarPU / ODX (> 1: ODX better)
and each side's efficiency at 5, 10, 20 and 50 us (interpolated between measured sizes). Prints
JSON lines ("bench":"metg" and "bench":"metg_curve"), then readable tables.

usage: metg_summary.py RAW.jsonl [STARPU_VERSION DATE CPU]
"""
import json
import math
import statistics
import sys

EFF_AT = (5, 10, 20, 50)
INF = float("inf")


def metg(points):
    """points: [(task_us, eff)] of one pass. Returns (METG us, flag): flag "<" when the smallest
    size already reaches 0.5 (an upper bound), "unreached" (METG inf) when no size does."""
    pts = sorted(points)
    for k, (s, e) in enumerate(pts):
        if e >= 0.5:
            if k == 0:
                return s, "<"
            s0, e0 = pts[k - 1]
            x = math.log(s0) + (0.5 - e0) * (math.log(s) - math.log(s0)) / (e - e0)
            return math.exp(x), ""
    return INF, "unreached"


def eff_at(points, x):
    """Efficiency at task time x, log-linear between the measured sizes around it; None outside."""
    pts = sorted(points)
    for (s0, e0), (s1, e1) in zip(pts, pts[1:]):
        if s0 <= x <= s1:
            if s1 == s0:
                return e0
            f = (math.log(x) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return e0 + f * (e1 - e0)
    return None


def spread(values):
    """median, min, max of a list that may hold inf (unreached), or Nones when it is empty."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return None, None, None
    return statistics.median(v), v[0], v[-1]


def rnd(x, nd=3):
    return None if x is None or math.isinf(x) else round(x, nd)


def fmt_us(x):
    if x is None:
        return "-"
    return ">max" if math.isinf(x) else "%.3g" % x


def main():
    raw = sys.argv[1]
    starpu_version = sys.argv[2] if len(sys.argv) > 2 else "1.3"
    date = sys.argv[3] if len(sys.argv) > 3 else ""
    cpu = sys.argv[4] if len(sys.argv) > 4 else ""
    starpu_name = "starpu-" + ".".join(starpu_version.split("+")[0].split(".")[:2])

    # A task's time alone on one core is a property of the core: the fastest calibration of the
    # run measures it best (a pass calibrated under load counts its tasks too long, and its
    # efficiencies too high). Every run's task time and efficiency are rescaled to it.
    calib = [json.loads(l)["ns_per_iter"] for l in open(raw)
             if l.startswith('{"bench":"metg_calibrate"')]
    ns_best = min(calib) if calib else None

    runs = {}     # (pattern, width) -> runtime -> pass -> [(task_us, eff)]
    curves = {}   # (runtime, pattern, width, size_us) -> [eff] over passes
    info = {}     # runtime -> (sched, workers, radix)
    loads = []
    for line in open(raw):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "load" in r:
            loads.append(r["load"])
        if r.get("bench") != "metg" or r.get("pass", 0) < 1:
            continue
        if ns_best:
            scale = ns_best / r["ns_per_iter"]
            r["task_us"] *= scale
            r["efficiency"] *= scale
        ranks = r.get("ranks", 1)
        key = (r["pattern"], r["width"], ranks)
        runs.setdefault(key, {}).setdefault(r["runtime"], {}).setdefault(r["pass"], []).append(
            (r["task_us"], r["efficiency"]))
        curves.setdefault((r["runtime"], r["pattern"], r["width"], ranks, r["size_us"]),
                          []).append((r["task_us"], r["efficiency"]))
        info[r["runtime"]] = (r["sched"], r["workers"], r["radix"] or info.get(r["runtime"],
                                                                                ("", 0, 0))[2])

    order = {"trivial": 0, "stencil_1d": 1, "nearest": 2, "fft": 3, "tree": 4}
    rows = []
    for (pattern, width, ranks) in sorted(runs, key=lambda k: (k[2], order.get(k[0], 9), k[1])):
        per = runs[(pattern, width, ranks)]
        variant = "%s/w%d" % (pattern, width) + ("/%dranks" % ranks if ranks > 1 else "")
        out = {"bench": "metg", "variant": variant, "pattern": pattern, "width": width,
               "unit": "us (METG(50%), kernel time)"}
        if ranks > 1:
            out["ranks"] = ranks
        side = {}
        for rt in ("odx", "starpu"):
            passes = per.get(rt, {})
            m = {p: metg(pts) for p, pts in passes.items()}
            med, lo, hi = spread([v for v, _ in m.values()])
            effs = {}
            for x in EFF_AT:
                e = spread([eff_at(pts, x) for pts in passes.values()])
                effs[str(x)] = [rnd(e[0]), rnd(e[1]), rnd(e[2])]
            side[rt] = {"metg": m, "med": med, "min": lo, "max": hi, "eff": effs,
                        "below": sum(1 for _, f in m.values() if f == "<"),
                        "unreached": sum(1 for _, f in m.values() if f == "unreached")}
        o, a = side["odx"], side["starpu"]
        out.update({"value": rnd(o["med"]), "min": rnd(o["min"]), "max": rnd(o["max"]),
                    "passes": len(o["metg"]), "below_range": o["below"],
                    "unreached": o["unreached"], "eff": o["eff"],
                    "anchor": "%s %s" % (starpu_name, info.get("starpu", ("?",))[0]),
                    "anchor_value": rnd(a["med"]), "anchor_min": rnd(a["min"]),
                    "anchor_max": rnd(a["max"]), "anchor_below_range": a["below"],
                    "anchor_unreached": a["unreached"], "anchor_eff": a["eff"]})
        # the ratio of each pass's pair, then their median (inf: ODX never reached 50%)
        ratios = []
        for p in sorted(set(o["metg"]) & set(a["metg"])):
            ov, av = o["metg"][p][0], a["metg"][p][0]
            if math.isinf(ov) and math.isinf(av):
                continue
            ratios.append(0.0 if math.isinf(ov) else INF if math.isinf(av) else av / ov)
        rmed, rlo, rhi = spread(ratios)
        out.update({"ratio": rnd(rmed, 2), "ratio_min": rnd(rlo, 2), "ratio_max": rnd(rhi, 2)})
        if "odx" in info:
            out["sched"] = info["odx"][0]
            out["workers"] = info["odx"][1]
            if pattern == "nearest":
                out["radix"] = info["odx"][2]
        if loads:
            out["load_min"], out["load_max"] = min(loads), max(loads)
        if ns_best:
            out["ns_per_iter"] = ns_best
        out["date"] = date
        print(json.dumps(out, separators=(",", ":")))
        rows.append((out, side))

    for (rt, pattern, width, ranks, size), pts in sorted(curves.items()):
        med, lo, hi = spread([e for _, e in pts])
        print(json.dumps({"bench": "metg_curve", "runtime": rt, "pattern": pattern,
                          "width": width, "ranks": ranks, "size_us": size,
                          "task_us": round(statistics.median(t for t, _ in pts), 4),
                          "value": round(med, 4), "min": round(lo, 4), "max": round(hi, 4),
                          "unit": "efficiency", "passes": len(pts), "date": date},
                         separators=(",", ":")))

    print()
    sched = {rt: v[0] for rt, v in info.items()}
    print("METG(50%%), kernel-time convention, %s workers, ODX policy %s against %s %s; %s, %s"
          % (info.get("odx", ("", "?"))[1], sched.get("odx", "?"), starpu_name,
             sched.get("starpu", "?"), cpu, date))
    if loads:
        print("1-minute load during the runs: %.2f-%.2f" % (min(loads), max(loads)))
    if calib:
        print("task time = iterations x %.4f ns, the fastest of the passes' calibrations "
              "(%.4f-%.4f ns)" % (ns_best, min(calib), max(calib)))
    print("METG us: median [min-max] over passes ('<': smallest size already >= 0.5, in N passes;"
          " '>max': never 50%);")
    print("ratio = median over passes of StarPU METG / ODX METG (> 1: ODX better)")
    vw = max([14] + [len(out["variant"]) for out, _ in rows])  # "stencil_1d/w4/2ranks"
    fmt = "%-" + str(vw) + "s %-26s %-26s %-18s"
    print(fmt % ("pattern/width", "ODX METG", "StarPU METG", "ratio"))

    def cell(s):
        txt = "%s [%s-%s]" % (fmt_us(s["med"]), fmt_us(s["min"]), fmt_us(s["max"]))
        if s["below"]:
            txt += " <%d" % s["below"]
        if s["unreached"]:
            txt += " >max%d" % s["unreached"]
        return txt

    for out, side in rows:
        ratio = "-" if out["ratio"] is None and out["ratio_max"] is None else \
            "%s [%s-%s]" % (out["ratio"], out["ratio_min"], out["ratio_max"])
        print(fmt % (out["variant"], cell(side["odx"]), cell(side["starpu"]), ratio))

    print()
    print("efficiency (median over passes) at 5 / 10 / 20 / 50 us")
    fmt = "%-" + str(vw) + "s %-28s %-28s"
    print(fmt % ("pattern/width", "ODX", "StarPU"))

    def effs(e):
        return " / ".join("-" if e[str(x)][0] is None else "%.2f" % e[str(x)][0] for x in EFF_AT)

    for out, side in rows:
        print(fmt % (out["variant"], effs(out["eff"]), effs(out["anchor_eff"])))

    print()
    print("efficiency curves (median over passes), ODX | StarPU, by task size (us)")
    sizes = sorted({k[4] for k in curves})
    print("%-*s " % (vw, "pattern/width") + " ".join("%9s" % s for s in sizes))
    for out, _ in rows:
        cells = []
        for s in sizes:
            e = [statistics.median(x for _, x in curves.get((rt, out["pattern"], out["width"],
                                                             out.get("ranks", 1), s),
                                                            [(0, float("nan"))]))
                 for rt in ("odx", "starpu")]
            cells.append("%4.2f|%4.2f" % tuple(e))
        print("%-*s " % (vw, out["variant"]) + " ".join("%9s" % c for c in cells))


if __name__ == "__main__":
    main()
