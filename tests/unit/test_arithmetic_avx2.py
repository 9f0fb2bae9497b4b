"""An AVX2-only host, emulated on any x86-64 host: ``qemu-x86_64-static -cpu Haswell`` (Debian's
qemu-user-static) runs this venv's Python with a CPU that has AVX2 and FMA but no AVX-512 and
no VNNI, and onnxruntime's MLAS picks its kernels by CPUID, so it takes the VPMADDUBSW path whose
int16 pair sums saturate (TOOLCHAIN 15). There is no onnxruntime switch for this (its kernels
are chosen at run time from CPUID; oneDNN's ONEDNN_MAX_CPU_ISA has no counterpart in MLAS).

What an AVX-512/VNNI machine cannot show by itself: the exact-QDQ arithmetic that verify uses
for TensorRT and ARM targets gives the same values on both CPUs (it is the graph's arithmetic),
and the host-kernel arithmetic does not (the trap quant.arithmetic exists for). Real
onnxruntime, real emulator; /proc/cpuinfo inside still shows the real host, so only CPUID-driven
code sees the older CPU."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from test_arithmetic import SW, SX, SY, K, saturating_gemm

QEMU = shutil.which("qemu-x86_64-static")
pytestmark = pytest.mark.skipif(QEMU is None or not sys.platform.startswith("linux"),
                                reason="needs qemu-x86_64-static (Debian qemu-user-static) on x86-64 Linux")

CHILD = r'''
import json, sys
import numpy as np
from edgeforge.quant.arithmetic import EXACT_QDQ, HOST_KERNELS, predictor
x = np.load(sys.argv[2])
out = {k: predictor(sys.argv[1], k)({"x": x})[0].tolist() for k in (EXACT_QDQ, HOST_KERNELS)}
print("RESULT " + json.dumps(out))
'''


def _on(cpu: str | None, model, xfile) -> dict:
    cmd = ([QEMU, "-cpu", cpu] if cpu else []) + [sys.executable, "-c", CHILD, str(model), str(xfile)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert res.returncode == 0 and line, res.stdout[-2000:] + res.stderr[-2000:]
    return {k: np.array(v, np.float32) for k, v in json.loads(line[len("RESULT "):]).items()}


def test_exact_qdq_is_cpu_independent_and_host_kernels_are_not(tmp_path):
    from edgeforge.quant.arithmetic import EXACT_QDQ, HOST_KERNELS

    model = tmp_path / "gemm.onnx"
    w = saturating_gemm(model)
    xq = np.stack([np.sign(w[:, 0]) * 127, np.abs(w[:, 1]), np.full(K, 127)]).astype(np.float64)
    np.save(tmp_path / "x.npy", (xq * SX).astype(np.float32))
    exact = np.clip(np.round(xq @ w.astype(np.float64) * SX * SW / SY), -128, 127) * SY
    native = _on(None, model, tmp_path / "x.npy")
    avx2 = _on("Haswell", model, tmp_path / "x.npy")
    # the graph's own arithmetic: every value exact on both CPUs (powers-of-two scales: no rounding
    # of a product or a sum, so no summation order can move one)
    assert np.array_equal(native[EXACT_QDQ], exact) and np.array_equal(avx2[EXACT_QDQ], exact)
    # the emulated AVX2 CPU saturates: rows built so that every VPMADDUBSW pair sum overflows int16
    assert not np.array_equal(avx2[HOST_KERNELS], exact), np.abs(avx2[HOST_KERNELS] - exact).max() / SY
