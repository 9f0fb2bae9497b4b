"""What Paddle Lite's benchmark_bin prints, for tests (no ARM board or Lite C++ build here): its
Perf Info block, and its op-time profile text as lite/core/profile/profiler.cc (v2.13-rc) writes it, for
tests: no Paddle Lite build with --with_profile=ON exists on this machine. ``Profiler::Summary``
pads every column to a fixed width (``std::setw(n) << std::left``), an empty column is only
padding, the detailed summary comes first and the two concise ones after it, each behind a
LOG(INFO) prefix line."""
from __future__ import annotations

WIDTHS_TEXT = (30, 20, 30, 26, 15, 15, 15)        # OperatorType ... OutDim
WIDTH_FIGURE = 7


def _row(texts, avg, mn, mx, cur, per, mflops, gops):
    """One detailed row as profiler.cc prints it (fixed, 3 decimals; Per as "12.34%   ")."""
    s = " ".join(t.ljust(w) for t, w in zip(texts, WIDTHS_TEXT))
    s += "".join(" " + format(v, ".3f").ljust(WIDTH_FIGURE) for v in (avg, mn, mx, cur))
    s += " " + format(per, ".2f") + "%   " + " " + format(mflops, ".3f").ljust(10) + " " + format(gops, ".2f").ljust(7)
    return s


def _header(concise: bool) -> str:
    names = ["OperatorType", "KerneAttr(Place)", "KernelFuncName"]
    if not concise:
        names += ["Remark", "InDim", "FilterDim", "OutDim"]
    s = " ".join(n.ljust(w) for n, w in zip(names, WIDTHS_TEXT))
    figures = ["Avg(ms)", "Min(ms)", "Max(ms)"] + ([] if concise else ["Cur(ms)"]) + ["Per(%)", "MFLOPs"]
    figures += ["CalledTimes"] if concise else ["GOPS"]
    return s + "".join(" " + f.ljust(WIDTH_FIGURE) for f in figures)


KERNELS = [  # op, place, kernel func, remark, in, filter, out, avg ms
    ("calib", "kARM/kInt8/kNCHW", "", "", "1x1x32x32", "", "1x1x32x32", 0.010),
    ("conv2d", "kARM/kInt8/kNCHW", "conv_direct_3x3s1", "int8->int8", "1x1x32x32", "16x1x3x3", "1x16x32x32", 0.300),
    ("conv2d", "kARM/kInt8/kNCHW", "conv_gemm_int8", "int8->fp32", "1x16x16x16", "32x16x3x3", "1x32x16x16", 0.500),
    ("pool2d", "kARM/kFloat/kNCHW", "pooling_basic", "", "1x32x16x16", "", "1x32x8x8", 0.040),
    ("calib", "kARM/kInt8/kNCHW", "", "", "1x2048", "", "1x2048", 0.020),
    ("fc", "kARM/kInt8/kNCHW", "gemv_int8", "", "1x2048", "10x2048", "1x10", 0.130),
]


def lite_log(kernels=KERNELS) -> str:
    total = sum(k[-1] for k in kernels)
    lines = ["[I 12/ 1 18:00:00.100 ...src/lite/api/tools/benchmark/benchmark.cc:99 Run] warmup done",
             "[I 12/ 1 18:00:00.200 ...lite/core/program.h:210 ~RuntimeProgram] ",
             "===== Detailed Dispatch Profiler Summary: N/A, Exclude 1 first-epoch =====", _header(False)]
    for op, place, func, remark, ind, fil, outd, ms in kernels:
        lines.append(_row([op, place, func, remark, ind, fil, outd], ms, ms * 0.9, ms * 1.5, ms, 100 * ms / total,
                          1.234, 4.56))
    lines += ["", "[I 12/ 1 18:00:00.201 ...lite/core/program.h:213 ~RuntimeProgram] ", "Timing cycle = 40",
              "===== Concise Dispatch Profiler Summary: N/A, Exclude 10 warm-ups =====", _header(True),
              "conv2d                         kARM/kInt8/kNCHW     conv_gemm_int8                 0.500   0.450"
              "   0.750   50.00%  1.234      1          ", ""]
    return "\n".join(lines) + "\n"


def perf_info(avg_ms: float, version: str = "v2.13-stub") -> str:
    """benchmark_bin's Runtime Info and Perf Info blocks (min, max and avg all ``avg_ms``)."""
    return (f"======= Runtime Info =======\nbenchmark_bin version: {version}\n======= Perf Info =======\n"
            f"Time(unit: ms):\ninit  = 12.000\nfirst = 3.000\nmin   = {avg_ms:.3f}\nmax   = {avg_ms:.3f}\n"
            f"avg   = {avg_ms:.3f}\n")
