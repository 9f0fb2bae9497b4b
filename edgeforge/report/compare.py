"""Compare two bench runs of (usually) two artifacts on one device, and say only what the data supports.

Method (pyperf's stance — "not significant" unless the data clearly say otherwise — adapted to
timing samples that are autocorrelated and heavy-tailed):

1. Refuse to compare runs from different stable device fingerprints (CPU model, kernel, cores,
   governor) or different runtimes (name, version) unless ``force=True``: such a difference is
   a difference of machines or runtimes, not of artifacts.
2. Autocorrelation. Consecutive samples of one run are not independent (frequency and thermal
   state, cache and background bursts persist for many iterations); a rank test on the raw
   samples treats n correlated samples as n independent ones and calls noise significant (with
   lag-1 correlation 0.5 the raw-sample Mann-Whitney test flags ~25% of identical-run pairs at
   alpha=0.05; at 0.9, ~60%). So each run is cut into contiguous blocks of
   ``b = max(floor(sqrt(n)), ceil(2 * tau))`` samples, where ``tau = (1 + r) / (1 - r)`` is the
   AR(1) integrated autocorrelation time from the run's lag-1 Spearman correlation ``r`` (the
   larger ``b`` of the two runs is used for both), and the test runs on the block medians
   (batch medians — the batch-means method of simulation output analysis). Block medians are
   close to independent and robust to the outliers that give timings their heavy right tail.
3. Test: two-sided Mann-Whitney U (scipy) on the block medians. The raw-sample p-value is also
   reported (``p_value_iid``), for reference only.
4. Effect size: the ratio of the runs' medians, ``p50(B) / p50(A)``, with a percentile bootstrap
   confidence interval (scipy, level ``1 - alpha``, fixed seed so a report is reproducible) over
   the block medians.
5. Verdict: B is "faster"/"slower" only when all three hold — p < alpha, the interval excludes
   1, and the median changed by at least ``min_change`` (default 1%). Below that practical
   threshold the change is called "not significant" even when p is small: with two single runs
   the between-run variation (memory layout, boot-to-boot frequency state) cannot be estimated
   and is routinely of that order. "X% slower" is ``(ratio - 1) * 100``; "X% faster" is the time
   saved, ``(1 - ratio) * 100``.

It also warns (without changing the verdict) when a run is unstable (MAD > 10% of the median),
strongly autocorrelated, too short to reach significance at all, thermally drifting, or
oversubscribed, when the settings differ, when both runs are the same artifact, and when a
fingerprint key is recorded by one run only.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, replace

import numpy as np

from ..errors import ConfigError
from ..results.stats import relative_spread
from .load import validate_result
from .pairing import emulated, emulated_reason, fingerprint_differences, runtime_differences, short

ALPHA = 0.05
MIN_CHANGE = 0.01            # practical threshold: |p50 change| below 1% is "not significant"
BOOTSTRAP_RESAMPLES = 4999
BOOTSTRAP_SEED = 20240601
UNSTABLE_MAD = 0.10          # MAD / median above this: warn, as pyperf does for stdev / mean
AUTOCORRELATED = 0.5         # lag-1 rank correlation above this: warn
THERMAL_DELTA_C = 10.0
# settings that change what a sample measures (warmup and run counts, timeouts do not)
MEASUREMENT_SETTINGS = ("threads", "batch", "power_mode", "execution_providers", "runner")


@dataclass(frozen=True)
class CompareResult:
    verdict: str                 # "faster" | "slower" | "not significant" (B relative to A)
    ratio: float                 # p50(B) / p50(A)
    ci_low: float                # bootstrap interval of the ratio (nan when it cannot be formed)
    ci_high: float
    p_value: float               # Mann-Whitney U, two-sided, on block medians
    p_value_iid: float           # the same test on raw samples (assumes independence; reference only)
    p50_a_ms: float
    p50_b_ms: float
    n_a: int
    n_b: int
    block_size: int
    blocks_a: int
    blocks_b: int
    lag1_a: float
    lag1_b: float
    alpha: float
    min_change: float
    reason: str                  # why "not significant" ("" when significant)
    labels: tuple[str, str] = ("A", "B")
    forced_past: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def significant(self) -> bool:
        return self.verdict != "not significant"

    @property
    def change_pct(self) -> float:
        """Change of B's median relative to A's, in percent (positive: B is slower)."""
        return (self.ratio - 1.0) * 100.0

    @property
    def line(self) -> str:
        a, b = self.labels
        level = f"{(1 - self.alpha) * 100:g}%"
        ci = (f"{level} CI {self.ci_low:.3f}-{self.ci_high:.3f}" if math.isfinite(self.ci_low)
              else f"{level} CI n/a")
        stats = f"p50 {self.p50_b_ms:.4g} vs {self.p50_a_ms:.4g} ms, ratio {self.ratio:.3f}, {ci}"
        if self.verdict == "slower":
            return f"{b} is {self.change_pct:.1f}% slower than {a} (Mann-Whitney p={self.p_value:.2g}; {stats})"
        if self.verdict == "faster":
            return f"{b} is {-self.change_pct:.1f}% faster than {a} (Mann-Whitney p={self.p_value:.2g}; {stats})"
        return f"not significant: {b} vs {a} {self.change_pct:+.1f}%, {self.reason} ({stats})"

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(significant=self.significant, change_pct=self.change_pct, line=self.line,
                 labels=list(self.labels), forced_past=list(self.forced_past), warnings=list(self.warnings))
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def lag1_autocorrelation(samples: np.ndarray) -> float:
    """Spearman correlation of consecutive samples (0 when it cannot be formed)."""
    from scipy.stats import spearmanr

    if len(samples) < 4 or np.ptp(samples) == 0:
        return 0.0
    r = spearmanr(samples[:-1], samples[1:]).statistic
    return float(r) if np.isfinite(r) else 0.0


def block_size(n: int, lag1: float) -> int:
    """Samples per block: enough that block medians are roughly independent (see module doc)."""
    r = min(max(lag1, 0.0), 0.98)
    tau = (1.0 + r) / (1.0 - r)
    return max(1, math.isqrt(n), math.ceil(2.0 * tau - 1e-9))


def block_medians(samples: np.ndarray, size: int) -> np.ndarray:
    k = max(1, len(samples) // size)
    return np.array([np.median(chunk) for chunk in np.array_split(samples, k)])


def compare(a: dict, b: dict, force: bool = False, alpha: float = ALPHA, *,
            min_change: float = MIN_CHANGE, labels: tuple[str, str] = ("A", "B")) -> CompareResult:
    """Compare run B against run A (see the module doc for the method). Raises ConfigError
    (exit 2) for runs from different device fingerprints or runtimes unless ``force``."""
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha must be between 0 and 1, not {alpha}")
    if min_change < 0:
        raise ConfigError(f"the practical threshold must be >= 0, not {min_change}")
    validate_result(a, labels[0])
    validate_result(b, labels[1])
    emu = [emulated_reason(r, who) for r, who in zip((a, b), labels) if emulated(r)]
    if emu and not force:
        raise ConfigError(f"refusing to compare {labels[0]} and {labels[1]}: {' and '.join(emu)}; "
                          "emulated timings are not performance figures",
                          hint="drift and accuracy from it are real; pass --force to compare timings anyway")
    fp_diff, fp_unknown = fingerprint_differences(a, b)
    rt_diff = runtime_differences(a, b)
    reasons = ([f"different device fingerprints ({'; '.join(fp_diff)})"] if fp_diff else []) + \
              ([f"different runtimes ({'; '.join(rt_diff)})"] if rt_diff else [])
    forced_emu = tuple(f"{e}: emulated timings" for e in emu)
    if reasons and not force:
        raise ConfigError(f"refusing to compare {labels[0]} and {labels[1]}: {' and '.join(reasons)}",
                          hint="a difference would measure the device or the runtime, not the artifacts; "
                               "pass --force (force=True) to compare anyway")

    xa = np.asarray(a["samples_ms"], dtype=float)
    xb = np.asarray(b["samples_ms"], dtype=float)
    res = compare_samples(xa, xb, alpha, min_change=min_change, labels=labels)
    notes = _warnings(_Side(labels[0], a, xa, res.lag1_a, res.blocks_a),
                      _Side(labels[1], b, xb, res.lag1_b, res.blocks_b), alpha, fp_unknown)
    forced = tuple(reasons) + forced_emu
    if forced:
        notes.insert(0, f"forced past: {' and '.join(forced)}; the difference may come from the "
                        f"device or the runtime, not the artifacts")
    return replace(res, forced_past=forced, warnings=tuple(notes))


def compare_samples(xa, xb, alpha: float = ALPHA, *, min_change: float = MIN_CHANGE,
                    labels: tuple[str, str] = ("A", "B")) -> CompareResult:
    """The statistics of :func:`compare` on two raw sample lists (milliseconds), without the
    result documents' checks and notes: e.g. two models timed interleaved on the build host."""
    from scipy.stats import bootstrap, mannwhitneyu

    xa, xb = np.asarray(xa, dtype=float), np.asarray(xb, dtype=float)
    lag_a, lag_b = lag1_autocorrelation(xa), lag1_autocorrelation(xb)
    size = max(block_size(len(xa), lag_a), block_size(len(xb), lag_b))
    ma, mb = block_medians(xa, size), block_medians(xb, size)

    p = float(mannwhitneyu(ma, mb, alternative="two-sided").pvalue)
    p_iid = float(mannwhitneyu(xa, xb, alternative="two-sided").pvalue)
    p50_a, p50_b = float(np.median(xa)), float(np.median(xb))
    ratio = p50_b / p50_a
    ci_low, ci_high = _ratio_interval(ma, mb, 1 - alpha, bootstrap)

    excludes_one = math.isfinite(ci_low) and (ci_low > 1.0 or ci_high < 1.0)
    if not p < alpha:
        reason = f"Mann-Whitney p={p:.2g} >= {alpha:g}"
    elif abs(ratio - 1.0) < min_change:
        reason = f"below the {min_change * 100:g}% practical threshold though p={p:.2g}"
    elif not math.isfinite(ci_low):
        reason = "no confidence interval of the ratio could be formed"
    elif not excludes_one:
        reason = "the confidence interval of the ratio includes 1"
    else:
        reason = ""
    verdict = "not significant" if reason else ("slower" if ratio > 1 else "faster")
    return CompareResult(verdict=verdict, ratio=ratio, ci_low=ci_low, ci_high=ci_high, p_value=p,
                         p_value_iid=p_iid, p50_a_ms=p50_a, p50_b_ms=p50_b, n_a=len(xa), n_b=len(xb),
                         block_size=size, blocks_a=len(ma), blocks_b=len(mb), lag1_a=lag_a, lag1_b=lag_b,
                         alpha=alpha, min_change=min_change, reason=reason, labels=tuple(labels))


def _ratio_interval(ma: np.ndarray, mb: np.ndarray, level: float, bootstrap) -> tuple[float, float]:
    if min(len(ma), len(mb)) < 2:
        return math.nan, math.nan

    def ratio(x, y, axis=-1):
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate (constant) resample distribution is fine here
        res = bootstrap((ma, mb), ratio, vectorized=True, paired=False, confidence_level=level,
                        n_resamples=BOOTSTRAP_RESAMPLES, method="percentile",
                        rng=np.random.default_rng(BOOTSTRAP_SEED))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else (math.nan, math.nan)


def _min_two_sided_p(m: int, n: int) -> float:
    """The smallest p an exact two-sided Mann-Whitney test can give with m and n values."""
    return min(1.0, 2.0 / math.comb(m + n, m))


@dataclass(frozen=True)
class _Side:
    """One run as the notes see it: its label, the result, its samples, their lag-1
    autocorrelation and the number of independent blocks the test used."""

    label: str
    result: dict
    samples: np.ndarray
    lag: float
    blocks: int


def _warnings(side_a: _Side, side_b: _Side, alpha: float, fp_unknown) -> list[str]:
    notes: list[str] = []
    la, lb = side_a.label, side_b.label
    a, b = side_a.result, side_b.result
    ka, kb = side_a.blocks, side_b.blocks
    if a["artifact"]["sha256"] == b["artifact"]["sha256"]:
        notes.append(f"{la} and {lb} are the same artifact ({short(a['artifact']['sha256'])}): any difference "
                     f"is run-to-run variation of the device, not the model")
    if _min_two_sided_p(ka, kb) >= alpha:
        notes.append(f"only {ka} and {kb} independent blocks of samples: no difference can reach p<{alpha:g}; "
                     f"run more iterations")
    for name, x, lag in ((la, side_a.samples, side_a.lag), (lb, side_b.samples, side_b.lag)):
        spread = relative_spread(x)             # MAD / median
        if spread is not None and spread > UNSTABLE_MAD:
            notes.append(f"{name} is unstable: MAD is {spread * 100:.0f}% of the median")
        if lag > AUTOCORRELATED:
            notes.append(f"{name}'s samples are autocorrelated (lag-1 r={lag:.2f}): tested on block medians")
    for name, r in ((la, a), (lb, b)):
        fp = r["device"]["fingerprint"]
        t0, t1 = fp.get("temp_c_before"), fp.get("temp_c_after")
        if isinstance(t0, (int, float)) and isinstance(t1, (int, float)) and t1 - t0 >= THERMAL_DELTA_C:
            notes.append(f"{name} heated up by {t1 - t0:.0f} C during the run ({t0:.0f} -> {t1:.0f} C): "
                         f"possible thermal throttling")
        load, cores = fp.get("load_avg"), fp.get("cores")
        if isinstance(load, list) and load and isinstance(cores, int) and cores and load[0] > cores:
            notes.append(f"{name}'s device was oversubscribed (load {load[0]:.1f} on {cores} cores)")
    ta = a["device"]["fingerprint"].get("temp_c_before")
    tb = b["device"]["fingerprint"].get("temp_c_before")
    if isinstance(ta, (int, float)) and isinstance(tb, (int, float)) and abs(ta - tb) >= THERMAL_DELTA_C:
        notes.append(f"the runs started at different temperatures ({ta:.0f} vs {tb:.0f} C)")
    sa, sb = a.get("settings") or {}, b.get("settings") or {}
    differ = [f"{k} {sa.get(k)} vs {sb.get(k)}" for k in MEASUREMENT_SETTINGS if sa.get(k) != sb.get(k)]
    if differ:
        notes.append(f"settings differ: {', '.join(differ)}")
    if fp_unknown:
        notes.append(f"only one run records {', '.join(fp_unknown)}: not checked")
    return notes
