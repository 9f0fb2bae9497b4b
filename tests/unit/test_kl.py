"""edgeforge.quant.kl: the fast KL threshold search and sampling helpers choose exactly what
Paddle's own code chooses (Paddle's functions are the oracle, imported from paddle)."""
from __future__ import annotations

import math
import os

os.environ["FLAGS_enable_pir_api"] = "0"

import numpy as np
import pytest

from edgeforge.quant import kl as K

ref_mod = pytest.importorskip("paddle.static.quantization.cal_kl_threshold")
ptq_mod = pytest.importorskip("paddle.static.quantization.post_training_quantization")
REFERENCE = ref_mod.cal_kl_threshold


# --------------------------------------------------------------------------- histograms
def activation_hist(rng, n=2048, size=None):
    """|activation| histogram as Paddle builds it: 2048 bins over [min|x|, max|x|]."""
    size = size or int(rng.integers(20_000, 400_000))
    kind = rng.integers(0, 4)
    if kind == 0:                                        # ReLU: spike at 0, half-normal body
        x = np.maximum(rng.standard_normal(size) * rng.uniform(0.2, 4), 0)
    elif kind == 1:                                      # ReLU6-clipped
        x = np.clip(rng.standard_normal(size) * 3, 0, 6)
    elif kind == 2:                                      # heavy tail (Student t)
        x = np.abs(rng.standard_t(rng.uniform(1.5, 4), size))
    else:                                                # linear bottleneck, skewed
        x = np.abs(rng.gamma(rng.uniform(0.3, 2), 1.0, size) - rng.uniform(0, 1))
    x = x.astype(np.float32)
    hist, edges = np.histogram(np.abs(x), bins=n, range=(float(x.min()), float(x.max())))
    return hist, edges[1] - edges[0]


def synthetic_hist(rng, kind, n):
    if kind == "uniform":
        return rng.integers(0, 1000, n)
    if kind == "geometric":                              # long-tailed, then all-empty tail
        return np.floor(1e9 * np.exp(-np.arange(n) * rng.uniform(0.002, 0.05))).astype(np.int64)
    if kind == "sparse":
        h = np.zeros(n, np.int64)
        idx = rng.choice(n, int(rng.integers(1, min(40, n))), replace=False)
        h[idx] = rng.integers(1, 100, idx.size)
        return h
    if kind == "one_bin":
        h = np.zeros(n, np.int64)
        h[rng.integers(0, n)] = int(rng.integers(1, 10**9))
        return h
    if kind == "holes":                                  # dense with random empty bins
        h = rng.integers(1, 10**6, n)
        h[rng.random(n) < rng.uniform(0.1, 0.9)] = 0
        return h
    if kind == "ones":                                   # counts of 0/1: many exact ties in q
        return (rng.random(n) < rng.uniform(0.05, 1)).astype(np.int64)
    if kind == "constant":
        return np.full(n, int(rng.integers(1, 10**6)), np.int64)
    if kind == "huge":                                   # totals near 2**53
        return rng.integers(0, 2**53 // (2 * n), n)
    raise ValueError(kind)


KINDS = ["uniform", "geometric", "sparse", "one_bin", "holes", "ones", "constant", "huge"]


def same(a, b):
    return type(a) is type(b) and (a == b or (a != a and b != b))


# --------------------------------------------------------------------------- threshold search
@pytest.mark.parametrize("seed", range(6))
def test_realistic_2048_bin_histograms_match_reference(seed):
    rng = np.random.default_rng(1000 + seed)
    hist, width = activation_hist(rng)
    assert same(K.cal_kl_threshold_fast(hist, width, 8), REFERENCE(hist, width, 8))


@pytest.mark.parametrize("kind", KINDS)
def test_synthetic_2048_bin_histograms_match_reference(kind):
    rng = np.random.default_rng(hash(kind) % 2**32)
    hist = synthetic_hist(rng, kind, 2048)
    assert same(K.cal_kl_threshold_fast(hist, 0.01, 8), REFERENCE(hist, 0.01, 8))


@pytest.mark.slow
def test_many_small_histograms_match_reference():
    """Hundreds of histograms, every kind, sizes around and below 2 * 127 bins (where a
    merged block holds 0 or 1 bins), several bit widths."""
    rng = np.random.default_rng(7)
    checked = 0
    for trial in range(240):
        n = int(rng.choice([3, 4, 17, 100, 253, 254, 255, 256, 300, 511, 600]))
        bits = int(rng.choice([8, 8, 8, 4, 7, 16 if n <= 17 else 8]))   # 16: 32767 levels
        if trial % 3 == 0:
            hist, width = activation_hist(rng, n=n, size=int(rng.integers(50, 100_000)))
        else:
            hist, width = synthetic_hist(rng, KINDS[trial % len(KINDS)], n), float(rng.uniform(1e-4, 1))
        got, want = K.cal_kl_threshold_fast(hist, width, bits), REFERENCE(hist, width, bits)
        assert same(got, want), (trial, n, bits)
        checked += 1
    assert checked == 240


@pytest.mark.slow
def test_edge_cases_match_reference():
    cases = [
        np.zeros(2048, np.int64),                                  # nothing at all
        np.eye(1, 2048, 0, dtype=np.int64)[0] * 5,                 # all mass in bin 0
        np.eye(1, 2048, 2047, dtype=np.int64)[0] * 5,              # all mass in the last bin
        np.eye(1, 2048, 1023, dtype=np.int64)[0] * 5,              # at starting_iter
        np.r_[np.zeros(1500, np.int64), np.ones(548, np.int64)],   # empty head
        np.r_[np.ones(700, np.int64) * 9, np.zeros(1348, np.int64)],  # empty tail
        np.arange(2048, dtype=np.int64)[::-1].copy(),
        np.arange(600, dtype=np.int32),                            # other integer dtype
        (np.arange(600) % 7).astype(np.float64),                   # integral floats
        np.random.default_rng(3).random(300),                      # fractional: reference path
    ]
    for hist in cases:
        for bits in (8, 5):
            assert same(K.cal_kl_threshold_fast(hist, 0.5, bits), REFERENCE(hist, 0.5, bits))


def test_refine_step_alone_matches_reference(monkeypatch):
    """With the screen's tolerance blown up every threshold is a candidate, so the choice is
    made by the exact (refine) values alone: it must still be the reference's."""
    monkeypatch.setattr(K.threshold, "_TOL_SAFETY", 1e18)
    rng = np.random.default_rng(21)
    hists = [activation_hist(rng, n=600)[0], synthetic_hist(rng, "ones", 600),
             synthetic_hist(rng, "holes", 400), activation_hist(rng)[0]]
    for hist in hists:
        assert same(K.cal_kl_threshold_fast(hist, 0.25, 8), REFERENCE(hist, 0.25, 8))


def test_more_levels_than_bins():
    """bits so large that 2**(bits-1)-1 exceeds the bin count: one merged block. The fast
    path must neither differ nor allocate per level (bits=32 would be 2**31 levels)."""
    rng = np.random.default_rng(4)
    for n in (40, 200):
        hist = rng.integers(0, 50, n)
        hist[rng.random(n) < 0.3] = 0
        want = REFERENCE(hist, 0.1, 12)                      # 2047 levels > n
        assert same(K.cal_kl_threshold_fast(hist, 0.1, 12), want)
        assert same(K.cal_kl_threshold_fast(hist, 0.1, 32), want)


def _reference_kl_values(hist, bits=8):
    """KL for every threshold i, with Paddle's own helpers, in the reference's loop."""
    n = hist.shape[0]
    R = 2 ** (bits - 1) - 1
    P_sum = np.sum(np.array(hist).ravel())
    out = {}
    for i in range(int((n - 1) * 0.5), n):
        P = hist[0:i].tolist()
        outliers = sum(hist[i:])
        if P[i - 1] == 0:
            continue
        P[i - 1] += outliers
        ref_bins = P[:]
        cand = hist[0:i].tolist()
        m = int(i / R)
        quant = [0] * R
        js, je = 0, m
        for idx in range(R):
            quant[idx] = sum(cand[js:je])
            js += m
            je += m
            if (idx + 1) == R - 1:
                je = i
        Q = ref_mod.expand_quantized_bins(quant, ref_bins)
        out[i] = ref_mod.safe_entropy(P, P_sum, Q, sum(Q))
    return out


@pytest.mark.parametrize("n", [260, 700])
def test_exact_kl_values_are_bit_identical(n):
    """The refine step reproduces every reference KL value to the last bit (so ties and
    near-ties resolve the same way), not only the winner."""
    rng = np.random.default_rng(n)
    for hist in (activation_hist(rng, n=n)[0], synthetic_hist(rng, "holes", n)):
        want = _reference_kl_values(hist)
        got = K.kl_divergences_exact(hist)
        assert got.keys() == want.keys()
        assert all(float(got[i]) == float(want[i]) for i in want)


def test_screen_bound_holds():
    """The vectorised screen stays inside its error bound of the exact values (with room)."""
    rng = np.random.default_rng(11)
    worst = 0.0
    for trial in range(40):
        n = int(rng.choice([256, 1000, 2048]))
        h = activation_hist(rng, n=n)[0] if trial % 2 else synthetic_hist(rng, KINDS[trial % 8], n)
        h = K.as_counts(h)
        C = np.concatenate(([0], np.cumsum(h)))
        NZ = np.concatenate(([0], np.cumsum(h != 0)))
        I = np.arange(int((n - 1) * 0.5), n)
        I = I[h[I - 1] != 0]
        if not I.size:
            continue
        kl, tol = K.screen(h, C, NZ, I, 127)
        exact = np.array([K.exact_kl(h, C, NZ, int(i), 127) for i in I])
        worst = max(worst, float(np.max(np.abs(kl - exact) / tol)))
    assert worst < 0.25


# --------------------------------------------------------------------------- sampling helpers
def test_abs_histogram_matches_numpy():
    rng = np.random.default_rng(5)
    for trial in range(80):
        size = int(rng.choice([1, 7, 70_000, 300_000, 2_500_000]))   # > _CHUNK: threads
        x = (rng.standard_normal(size) * rng.uniform(0.01, 100)).astype(np.float32)
        kind = trial % 8
        if kind == 1:
            x = np.maximum(x, 0)                                   # ReLU
        elif kind == 2:
            x = x + np.float32(rng.uniform(-50, 50))               # min |x| > 0, both signs
        elif kind == 3:
            x = np.round(x * 4) / np.float32(4)                    # repeated values
        n = int(rng.choice([2048, 2048, 100, 1]))
        ax = np.abs(x)
        _, edges = np.histogram([], bins=n, range=(float(ax.min()), float(ax.max())))
        if kind == 4:                                              # values on / just below edges
            t = K.f32_ceil(edges)
            k = rng.integers(0, n + 1, min(size, 5000))
            v = np.where(rng.random(k.size) < 0.5, t[k], np.nextafter(t[k], np.float32(-np.inf)))
            x[:k.size] = v * np.where(rng.random(k.size) < 0.5, 1, -1).astype(np.float32)
        elif kind == 5 and size > 10:                              # values outside the edges
            _, edges = np.histogram([], bins=n, range=(float(ax.max()) * 0.1, float(ax.max()) * 0.9))
        elif kind == 6 and size > 10:
            x[size // 2] = np.nan
        elif kind == 7:
            x = x.astype(np.float64)                               # numpy path
        want = np.histogram(np.abs(x), bins=edges)[0]
        before = x.copy()
        got = K.abs_histogram(x, edges)
        assert got.dtype == want.dtype and np.array_equal(got, want), trial
        assert np.array_equal(x, before, equal_nan=True)           # input untouched


def test_abs_histogram_degenerate_edges():
    x = np.full(1000, 3.0, np.float32)
    _, edges = np.histogram([], bins=2048, range=(3.0, 3.0))       # numpy widens to +-0.5
    assert np.array_equal(K.abs_histogram(x, edges), np.histogram(x, bins=edges)[0])
    # both signs, some |x| below the first edge, none above the last: the in-loop guard
    z = np.random.default_rng(1).uniform(-10, 10, 3_000_000).astype(np.float32)
    _, edges = np.histogram([], bins=2048, range=(2.0, float(np.abs(z).max())))
    assert np.array_equal(K.abs_histogram(z, edges), np.histogram(np.abs(z), bins=edges)[0])
    uneven = np.r_[0.0, np.cumsum(np.linspace(1, 2, 64))]
    y = np.random.default_rng(0).random(10_000).astype(np.float32) * 90
    assert np.array_equal(K.abs_histogram(y, uneven), np.histogram(y, bins=uneven)[0])


def test_paddle_kernel_histogram_matches_numpy():
    """Paddle's C++ histogram kernel, where kernel_plan accepts it, gives np.histogram's counts:
    PTQ-style edges from float32 |min|..|max| (tiny and zero minimums, narrow and wide ranges),
    values placed on / next to every edge, outside values, NaN, -0.0."""
    assert K.kernel_ok()
    rng = np.random.default_rng(17)
    used = 0
    for trial in range(48):
        size = int(rng.choice([5, 3000, 300_000, 700_000]))        # > _PD_BLOCK: several calls
        kind = trial % 6
        x = (rng.standard_normal(size) * rng.uniform(1e-3, 50)).astype(np.float32)
        if kind == 1:
            x = np.maximum(x, 0)                                   # ReLU: e0 == 0, many zeros
        elif kind == 2:
            x = np.clip(x, 0, 6).astype(np.float32)                # ReLU6: mass on the last edge
        elif kind == 3:
            x = x + np.float32(rng.uniform(-50, 50))               # e0 > 0, not tiny
        elif kind == 4:
            x[0] = np.float32(rng.uniform(1e-12, 1e-8))            # tiny e0 > 0 (signed layers)
        ax = np.abs(x)
        n = int(rng.choice([2048, 2048, 1000, 64]))
        lo, hi = float(ax.min()), float(ax.max())
        if kind == 5:                                              # PTQ: edges from other batches
            lo, hi = float(np.float32(lo * 1.5 + 1e-3)), float(np.float32(hi * 0.8))
        _, edges = np.histogram([], bins=n, range=(lo, hi))
        if size > 10 and kind != 2:
            t = K.f32_ceil(edges)
            k = rng.integers(0, n + 1, min(size // 3, 4000))
            v = np.where(rng.random(k.size) < 0.5, t[k], np.nextafter(t[k], np.float32(-np.inf)))
            x[:k.size] = v * np.where(rng.random(k.size) < 0.5, 1, -1).astype(np.float32)
            x[-1] = np.float32(-0.0)
            if trial % 4 == 0:
                x[-2] = np.nan
        used += K.kernel_plan(x, edges) is not None
        want = np.histogram(np.abs(x), bins=edges)[0]
        before = x.copy()
        got = K.abs_histograms_fast([(x, edges)])[0]
        assert got.dtype == want.dtype and np.array_equal(got, want), trial
        assert np.array_equal(x, before, equal_nan=True)
    assert used >= 40                                   # the kernel path is what was tested


def test_kernel_plan_refuses_what_it_cannot_prove():
    x = np.linspace(0, 1, 100, dtype=np.float32)
    _, edges = np.histogram([], bins=2048, range=(0.0, 1.0))
    assert K.kernel_plan(x, edges) is not None
    assert K.kernel_plan(x.astype(np.float64), edges) is None          # float64 data
    _, e = np.histogram([], bins=2048, range=(0.0, 0.1))                # 0.1: not a float32
    assert K.kernel_plan(x, e) is None
    uneven = np.r_[0.0, np.cumsum(np.linspace(1, 2, 64))]
    uneven = uneven / uneven[-1]                                         # [0, 1], uneven bins
    assert K.kernel_plan(x, uneven) is None
    bad = edges.copy()
    bad[1000] = np.nextafter(bad[1000], 2.0) + 1e-7                    # an edge moved: refused
    assert K.kernel_plan(x, bad) is None
    assert np.array_equal(K.abs_histograms_fast([(x, bad)])[0], np.histogram(x, bins=bad)[0])


def test_abs_min_max_matches_numpy():
    rng = np.random.default_rng(9)
    for trial in range(100):
        x = rng.standard_normal(int(rng.integers(1, 600_000))).astype(rng.choice([np.float32, np.float64]))
        kind = trial % 6
        if kind == 1:
            x = np.abs(x)
        elif kind == 2:
            x = -np.abs(x)
        elif kind == 3:
            x[0] = np.nan
        elif kind == 4:
            x[:] = -0.0
        elif kind == 5:
            x = (x * 10).astype(np.int32)
        a = np.abs(x)
        want = (float(np.min(a)), float(np.max(a)))
        got = K.abs_min_max(x)
        for g, w in zip(got, want):
            assert type(g) is float and (g == w or (math.isnan(g) and math.isnan(w)))
            assert math.isnan(w) or math.copysign(1, g) == math.copysign(1, w)


# --------------------------------------------------------------------------- Paddle PTQ
@pytest.fixture(autouse=True)
def _back_to_dynamic_mode():
    """The PTQ helpers below switch Paddle to static mode; later tests (paddle.jit.save) need
    the default dynamic mode back."""
    yield
    import paddle

    if not paddle.in_dynamic_mode():
        paddle.disable_static()


def _tiny_model(tmp_path):
    import paddle

    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = 3
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 3, 8, 8], "float32")
        h = paddle.nn.functional.relu(paddle.static.nn.conv2d(x, 4, 3, padding=1))
        h = paddle.static.nn.conv2d(h, 4, 3, padding=1)            # signed, min |x| > 0
        h = paddle.nn.functional.relu(h)
        y = paddle.static.nn.fc(paddle.flatten(h, 1), 5)
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        paddle.static.save_inference_model(str(tmp_path / "fp32" / "model"), [x], [y], exe, program=main)
    return tmp_path / "fp32"


def _ptq(model_dir, out_dir, batches, runs=None, **kw):
    """KL PTQ of ``model_dir``. ``batches``: a list, or a callable giving the list for the
    loader's k-th call (k = 0, 1, ...). ``runs``: a list that gets one entry per program run."""
    import paddle
    from paddle.static.quantization import PostTrainingQuantization

    paddle.enable_static()
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    if runs is not None:
        run = exe.run
        exe.run = lambda *a, **k: (runs.append(1), run(*a, **k))[1]
    calls = []

    def loader():
        data = batches(len(calls)) if callable(batches) else batches
        calls.append(1)
        return ({"x": b} for b in data)

    n = len(batches(0) if callable(batches) else batches)
    with paddle.static.scope_guard(scope), paddle.utils.unique_name.guard():
        ptq = PostTrainingQuantization(
            executor=exe, scope=scope, model_dir=str(model_dir),
            model_filename="model.pdmodel", params_filename="model.pdiparams",
            data_loader=loader, batch_nums=n, algo="KL", onnx_format=False, **kw)
        ptq.quantize()
        ptq.save_quantized_model(str(out_dir), model_filename="model.pdmodel",
                                 params_filename="model.pdiparams")
    return dict(ptq._quantized_var_threshold)


_METHODS = ("_sample_histogram", "_collect_activation_abs_min_max", "quantize")


@pytest.fixture(scope="module")
def ptq_setup(tmp_path_factory):
    """The tiny model, calibration data (fixed, or other data on each loader call), and Paddle's
    own KL PTQ result per data kind (computed once: its threshold search is the slow part)."""
    base = tmp_path_factory.mktemp("kl_ptq")
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((4, 3, 8, 8)).astype(np.float32) for _ in range(3)]
    data = {"same": batches,                             # e.g. random augmentation per epoch:
            "new": lambda call: [b * np.float32(1 + 0.5 * call) for b in batches]}
    model_dir = _tiny_model(base)
    reference = {}

    def get(kind):
        if kind not in reference:
            runs = []                                    # (model loading runs it too)
            scales = _ptq(model_dir, base / f"slow_{kind}", data[kind], runs=runs)
            reference[kind] = (scales, _saved_model_summary(base / f"slow_{kind}"), len(runs))
        return reference[kind]

    return model_dir, data, get


@pytest.mark.parametrize("case", ["keep", "rerun", "new_data_each_call", "small_budget"])
def test_fast_kl_ptq_gives_the_same_scales_and_unpatches(tmp_path, monkeypatch, ptq_setup, case):
    """Same thresholds and saved model as Paddle's own KL PTQ, whether the sampling pass reuses
    the kept activations (default), reruns the program (keep_bytes=0), gets other data from the
    loader than the preparation pass did (must rerun), or can keep only some batches."""
    model_dir, data, reference = ptq_setup
    kind = "new" if case == "new_data_each_call" else "same"
    keep_bytes = 0 if case == "rerun" else None
    if case == "small_budget":                           # room for the 2nd batch only
        sizes = []
        keep = K.keep_activations
        monkeypatch.setattr(K.ptq_methods, "keep_activations", lambda self, d, budget, u: (
            sizes.append(1), keep(self, d, budget if len(sizes) == 2 else 0, u))[1])
    kernel_calls = []
    kernel = K.kernel_histograms
    monkeypatch.setattr(K.histogram, "kernel_histograms", lambda items: (kernel_calls.append(len(items)),
                                                                kernel(items))[1])
    cls = ptq_mod.PostTrainingQuantization
    originals = (ptq_mod.cal_kl_threshold, ref_mod.cal_kl_threshold,
                 *(cls.__dict__[m] for m in _METHODS))
    assert originals[0] is REFERENCE and originals[1] is REFERENCE

    runs = []
    with K.fast_kl(keep_bytes=keep_bytes):
        assert ptq_mod.cal_kl_threshold is K.cal_kl_threshold_fast
        assert ref_mod.cal_kl_threshold is K.cal_kl_threshold_fast
        for method, original in zip(_METHODS, originals[2:]):
            assert cls.__dict__[method] is not original, method          # source matched
        fast = _ptq(model_dir, tmp_path / "fast", data[kind], runs=runs)
    assert (ptq_mod.cal_kl_threshold, ref_mod.cal_kl_threshold,
            *(cls.__dict__[m] for m in _METHODS)) == originals
    assert not K.installed()
    assert sum(kernel_calls) >= 3 * 4                    # Paddle's kernel made the histograms

    slow, slow_summary, slow_runs = reference(kind)
    skipped = {"keep": 3, "rerun": 0, "new_data_each_call": 0, "small_budget": 1}[case]
    assert slow_runs - len(runs) == skipped              # sampling-pass reruns avoided
    assert fast.keys() == slow.keys() and len(fast) >= 4
    for name in slow:
        assert np.array_equal(np.asarray(fast[name]), np.asarray(slow[name])), name
    assert _saved_model_summary(tmp_path / "fast") == slow_summary


def _saved_model_summary(model_dir):
    """What a saved int8 model says about quantization, independent of the order in which
    Paddle's graph passes happen to name the channel_scale_N variables: every parameter's
    value, and every op's type, outputs and float attributes (scales, thresholds)."""
    import paddle

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        prog, _, _ = paddle.static.load_inference_model(str(model_dir / "model"), exe)
        params = sorted(
            (v.name if not v.name.startswith("channel_scale_") else "channel_scale",
             np.array(scope.find_var(v.name).get_tensor()).tobytes())
            for v in prog.list_vars() if v.persistable and v.name not in ("feed", "fetch"))
        ops = sorted(
            (op.type, tuple(sorted(op.output_arg_names)),
             tuple(sorted((a, op.attr(a)) for a in op.attr_names
                          if isinstance(op.attr(a), float))))
            for op in prog.global_block().ops)
    return params, ops


def test_fast_kl_restores_on_error_and_nests():
    with pytest.raises(RuntimeError):
        with K.fast_kl():
            with K.fast_kl():
                assert ptq_mod.cal_kl_threshold is K.cal_kl_threshold_fast
            assert ptq_mod.cal_kl_threshold is K.cal_kl_threshold_fast   # outer still active
            raise RuntimeError("boom")
    assert ptq_mod.cal_kl_threshold is REFERENCE
    assert not K.installed()


def test_fast_kl_says_when_paddle_source_differs(monkeypatch):
    """A PTQ method whose source is not the one the fast path mirrors keeps Paddle's own, and
    status() says so (the quantize pass records it in the manifest)."""
    cls = ptq_mod.PostTrainingQuantization

    def _sample_histogram(self):                         # "a newer Paddle"
        return None

    monkeypatch.setattr(cls, "_sample_histogram", _sample_histogram)
    with K.fast_kl() as st:
        assert cls.__dict__["_sample_histogram"] is _sample_histogram
        assert ptq_mod.cal_kl_threshold is K.cal_kl_threshold_fast
    assert st["enabled"] is False
    assert "_sample_histogram" in st["reason"] and "quantize" in st["reason"]
    with K.fast_kl() as st:
        pass
    assert st["enabled"] is False                        # still patched by the test
    monkeypatch.undo()
    with K.fast_kl() as st:
        assert st == K.status()
    assert st["enabled"] is True and not K.installed()
