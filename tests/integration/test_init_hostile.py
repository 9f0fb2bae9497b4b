"""issue 44, init: hostile names, shapes, images, arrays and flags through the real CLI. Each is
refused with one line and exit 2 before anything is written (no project directory left), or
written so that the build reads back exactly what was meant; SIGTERM while the files are written
leaves none of them; a log an error names exists."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
import tomli
from PIL import Image

from edgeforge.project import load_project
from helpers import run_cli

FACTORY = ("--factory", "m:Net", "--input", "x:-1,1,8,8")


def _fails(res, fragment: str, code: int = 2) -> None:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def _gray(root: Path, n: int = 9, size: int = 8) -> Path:
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (size, size), dtype="uint8"), "L").save(root / f"{i}.png")
    return root


def _png_claiming(path: Path, width: int, height: int) -> Path:
    """A small valid 8x8 PNG whose header then claims ``width`` x ``height`` (CRC fixed)."""
    Image.new("L", (8, 8)).save(path)
    raw = bytearray(path.read_bytes())
    ihdr = raw[12:29]                                     # b"IHDR" + 13 bytes of header
    ihdr[4:12] = struct.pack(">II", width, height)
    raw[12:29] = ihdr
    raw[29:33] = struct.pack(">I", zlib.crc32(bytes(ihdr)))
    path.write_bytes(bytes(raw))
    return path


def test_hostile_directory_name_gives_a_file_that_reads_back(tmp_path):
    """A folder named with a quote and a line break that looks like a table: the project name is
    derived from it, the path in the next-step line is quoted on one line, the TOML holds no
    [task] table and loads as the build loads it."""
    work = tmp_path / 'p"3\n[task]\nkind = "ctc"'
    res = run_cli("init", str(work), *FACTORY, "--weights", 'w"\n[x].pdparams', cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert all(not line.startswith("[task]") for line in res.stdout.splitlines())
    doc = tomli.loads((work / "edgeforge.toml").read_text())
    assert "task" not in doc and doc["model"]["weights"] == '../w"\n[x].pdparams'
    project = load_project(work)
    assert project.spec.name == "p-3--task--kind----ctc-" and project.spec.task is None


@pytest.mark.parametrize("flags, fragment", [
    (("--input", "x:-1,1,100000,100000"), "more than init takes"),
    (("--input", "x:-1,1,1e19"), "integers separated by commas"),
    (("--input", "x:-1,1," + "9" * 30), "more than init takes"),
    (("--input", 'x"\n[task]:-1,1'), "write it as name:shape:dtype"),
    (("--input", "labels:-1,4"), "not one the build takes"),
    (("--input", "x:-1,4:float64"), "dtype 'float64' is not one of"),
    (("--name", 'a"b'), "--name 'a\"b'"),
])
def test_bad_model_flags_are_refused_before_anything_is_written(tmp_path, flags, fragment):
    args = ["--factory", "m:Net", *flags] if flags[0] == "--input" else [*FACTORY, *flags]
    _fails(run_cli("init", str(tmp_path / "new"), *args), fragment)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("flag, value", [("--mean", "nan"), ("--std", "inf"), ("--mean", "1e400"),
                                         ("--std", "0"), ("--std", "-1"), ("--mean", "0.5,nan,0.5"),
                                         ("--seed", "-3")])
def test_numeric_flags_are_finite_and_bounded(tmp_path, flag, value):
    data = _gray(tmp_path / "imgs")
    _fails(run_cli("init", str(tmp_path / "new"), *FACTORY, "--data", str(data), flag, value), f"argument {flag}")
    assert not (tmp_path / "new").exists()


def test_images_bounded_by_pixels_before_decoding(tmp_path):
    data = _gray(tmp_path / "imgs", n=3)
    _png_claiming(data / "bomb.png", 20000, 20000)           # Pillow's own DecompressionBombError
    _fails(run_cli("init", str(tmp_path / "a"), *FACTORY, "--data", str(data)), "more pixels than init decodes")
    _png_claiming(data / "bomb.png", 9000, 9000)               # below Pillow's limit, above init's
    _fails(run_cli("init", str(tmp_path / "a"), *FACTORY, "--data", str(data)), "(9000x9000) has more pixels")
    assert not (tmp_path / "a").exists()


def test_array_headers_bounded_before_reading(tmp_path):
    data = tmp_path / "arrs"
    data.mkdir()
    np.save(data / "ok.npy", np.zeros((3, 1, 8, 8), "float32"))
    with open(data / "huge.npy", "wb") as fh:                  # a header claiming 10^12 samples
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (10**12, 1, 8, 8)})
    _fails(run_cli("init", str(tmp_path / "a"), *FACTORY, "--data", str(data)), "more than init writes")
    (data / "huge.npy").unlink()
    np.savez(data / "obj.npz", x=np.zeros((2, 1, 8, 8), "complex64"))
    _fails(run_cli("init", str(tmp_path / "a"), *FACTORY, "--data", str(data)), "holds complex64 data")
    assert not (tmp_path / "a").exists()


def test_nan_arrays_are_refused(tmp_path):
    data = tmp_path / "arrs"
    data.mkdir()
    x = np.zeros((6, 1, 8, 8), "float32")
    x[4, 0, 2, 2] = np.nan
    np.save(data / "a.npy", x)
    _fails(run_cli("init", str(tmp_path / "a"), *FACTORY, "--data", str(data)), "NaN or infinite values (sample 4)")
    assert not (tmp_path / "a").exists()


def test_sixteen_bit_png_is_scaled_not_clipped(tmp_path):
    data = tmp_path / "imgs"
    data.mkdir()
    ramp = (np.arange(64, dtype="uint32").reshape(8, 8) * 1000).astype("uint16")     # 0 .. 63000
    for i in range(3):
        Image.fromarray(ramp).save(data / f"{i}.png")
    assert Image.open(data / "0.png").mode == "I;16"
    res = run_cli("init", str(tmp_path / "p"), *FACTORY, "--data", str(data), "--resample", "nearest")
    assert res.returncode == 0, res.stderr
    assert "(3 16-bit: by 65535)" in res.stdout
    with np.load(tmp_path / "p" / "data" / "eval.npz") as z:
        x = z["x"]
    np.testing.assert_allclose(x[0, 0], ramp / 65535.0, rtol=1e-6)
    assert (x >= 1.0).mean() == 0


def test_split_is_seeded_and_recorded(tmp_path):
    """data/split.json names each row's source image; the same seed gives the same split."""
    import json

    data = _gray(tmp_path / "imgs", n=12)
    for seed, name in ((7, "a"), (7, "b"), (8, "c")):
        res = run_cli("init", str(tmp_path / name), *FACTORY, "--data", str(data), "--seed", str(seed))
        assert res.returncode == 0, res.stderr
    split = json.loads((tmp_path / "a" / "data" / "split.json").read_text())
    assert split == json.loads((tmp_path / "b" / "data" / "split.json").read_text())
    assert split != json.loads((tmp_path / "c" / "data" / "split.json").read_text())
    assert split["seed"] == 7 and len(split["calibration"]) == 4 and len(split["evaluation"]) == 8
    with np.load(tmp_path / "a" / "data" / "eval.npz") as z:
        for row, src in zip(z["x"], split["evaluation"]):
            img = np.asarray(Image.open(data / src), dtype="float32") / 255.0
            np.testing.assert_allclose(row[0], img, atol=1e-6)


DRIVER = textwrap.dedent("""
    import importlib, os, signal, sys
    from edgeforge.cli.main import main

    where, n = sys.argv[1], int(sys.argv[2])
    module, name = where.split(":")
    module = importlib.import_module(module)
    real, seen = getattr(module, name), [0]

    def hook(*a, **k):
        out = real(*a, **k)
        seen[0] += 1
        if seen[0] == n:
            os.kill(os.getpid(), signal.SIGTERM)        # the real signal, at a known moment
        return out

    setattr(module, name, hook)
    sys.exit(main(sys.argv[3:]))
""")


@pytest.mark.parametrize("where, n", [("edgeforge.init_data:_pixels", 3), ("edgeforge.fsutil:_stage", 1),
                                      ("edgeforge.fsutil:_stage", 2), ("os:replace", 1), ("os:replace", 3)])
def test_sigterm_while_reading_or_writing_leaves_nothing(tmp_path, where, n):
    """SIGTERM after the third image is decoded, after the first (second) file is staged, or
    after the first (third) is renamed into place: exit 130 with one line, no calib.npz or other
    file, no temporary, no project directory."""
    data = _gray(tmp_path / "imgs")
    work = tmp_path / "new"
    res = subprocess.run([sys.executable, "-c", DRIVER, where, str(n), "init", str(work), *FACTORY,
                          "--data", str(data)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 130, (res.stdout, res.stderr)
    assert res.stderr.strip() == "error: interrupted (SIGTERM)"
    assert not work.exists(), sorted(str(p) for p in work.rglob("*"))


def test_a_failed_init_in_an_existing_directory_leaves_it_as_it_was(tmp_path):
    (tmp_path / "mine.txt").write_text("mine")
    data = tmp_path / "arrs"
    data.mkdir()
    np.save(data / "a.npy", np.full((3, 1, 8, 8), np.inf, "float32"))
    _fails(run_cli("init", str(tmp_path), *FACTORY, "--data", str(data)), "NaN or infinite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arrs", "mine.txt"]


def test_the_log_an_error_names_exists(tmp_path):
    (tmp_path / "m.py").write_text("class Net:\n    def __init__(self):\n        raise SystemExit(5)\n")
    res = run_cli("init", str(tmp_path), "--factory", "m:Net")
    _fails(res, "SystemExit: 5", code=3)
    log = Path(res.stderr.split("see ")[-1].strip())
    assert log.name == "factory.log" and log.is_file()
    assert not (tmp_path / "edgeforge.toml").exists()
    import shutil

    shutil.rmtree(log.parent)


def test_factory_specs_the_build_refuses_are_refused_before_writing(tmp_path):
    """A factory's InputSpec with a name or dtype the build refuses: exit 2, nothing written."""
    for name, dtype, fragment in (('a"b', "float32", "is not one the build takes"),
                                  ("x", "float64", "is float64; the build takes")):
        root = tmp_path / dtype
        root.mkdir()
        (root / "m.py").write_text(textwrap.dedent(f"""
            import paddle
            from paddle.static import InputSpec

            class Net(paddle.nn.Layer):
                def __init__(self):
                    super().__init__()
                    self.fc = paddle.nn.Linear(6, 3)

                @paddle.jit.to_static(input_spec=[InputSpec([None, 6], {dtype!r}, {name!r})])
                def forward(self, x):
                    return self.fc(x)
            """))
        _fails(run_cli("init", str(root), "--factory", "m:Net"), fragment)
        assert sorted(p.name for p in root.iterdir() if p.name != "__pycache__") == ["m.py"]
    assert os.listdir(tmp_path)


def _rgb16_png(path: Path, a: np.ndarray) -> None:
    """A 16-bit RGB PNG of ``a`` [h, w, 3] uint16 (Pillow cannot write one)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    h, w, _ = a.shape
    rows = b"".join(b"\x00" + a[r].astype(">u2").tobytes() for r in range(h))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_sixteen_bit_rgb_png_is_scaled(tmp_path):
    """Pillow reads a 16-bit RGB PNG as 8-bit (its high byte): scaled, within 1/255 of x/65535."""
    data = tmp_path / "imgs"
    data.mkdir()
    a = (np.arange(8 * 8 * 3).reshape(8, 8, 3) * 340).astype("uint16")                 # 0 .. 65,220
    for i in range(3):
        _rgb16_png(data / f"{i}.png", a)
    res = run_cli("init", str(tmp_path / "p"), "--factory", "m:Net", "--input", "x:-1,3,8,8", "--data", str(data))
    assert res.returncode == 0, res.stderr
    with np.load(tmp_path / "p" / "data" / "eval.npz") as z:
        np.testing.assert_allclose(z["x"][0].transpose(1, 2, 0), a / 65535.0, atol=1 / 255)


def test_integer_inputs_take_the_pixel_values(tmp_path):
    """A uint8 input gets the bytes 0-255 (not [0, 1] cast to 0 and 1); --mean with it is refused."""
    data = _gray(tmp_path / "imgs", n=6)
    res = run_cli("init", str(tmp_path / "p"), "--factory", "m:Net", "--input", "x:-1,8,8,1:uint8",
                  "--data", str(data))
    assert res.returncode == 0, res.stderr
    assert "pixel values (0-255), no mean/std, NHWC uint8" in res.stdout
    import json

    split = json.loads((tmp_path / "p" / "data" / "split.json").read_text())
    with np.load(tmp_path / "p" / "data" / "eval.npz") as z:
        assert z["x"].dtype == np.uint8
        np.testing.assert_array_equal(z["x"][0, :, :, 0], np.asarray(Image.open(data / split["evaluation"][0])))
    _fails(run_cli("init", str(tmp_path / "q"), "--factory", "m:Net", "--input", "x:-1,8,8,1:uint8",
                   "--data", str(data), "--mean", "0.5"), "images are written as their pixel values")


@pytest.mark.parametrize("where", ["a" * 300, "/proc/x", "/dev/null/x", "f/x"])
def test_a_directory_the_file_system_refuses_is_one_line(tmp_path, where):
    (tmp_path / "f").write_text("a file")
    _fails(run_cli("init", where, *FACTORY, cwd=tmp_path), "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize("labels, fragment", [("/dev/zero", "larger than init reads"), ("other", "a directory"),
                                              ("/nonexistent", "cannot read it"),
                                              ("imgs", "no images outside --labels imgs")])
def test_label_files_are_bounded_and_named(tmp_path, labels, fragment):
    _gray(tmp_path / "imgs", n=3)
    (tmp_path / "other").mkdir()
    _fails(run_cli("init", "p", *FACTORY, "--data", "imgs", "--task", "ctc", "--labels", labels, cwd=tmp_path),
           fragment)
    assert not (tmp_path / "p").exists()


def test_a_program_input_name_the_build_refuses_is_refused_before_writing(tmp_path):
    """An exported program whose input is named with a quote and a line break (Paddle takes it)."""
    script = ("import sys, paddle\npaddle.jit.save(paddle.nn.Linear(6, 3), sys.argv[1], input_spec=["
              "paddle.static.InputSpec([None, 6], 'float32', sys.argv[2])])\n")
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "exp" / "inf"), 'a"b\n[task]'], check=True,
                   env=dict(os.environ, FLAGS_enable_pir_api="0"), capture_output=True, timeout=300)
    res = run_cli("init", str(tmp_path / "p"), "--from-inference", str(tmp_path / "exp" / "inf"))
    _fails(res, "input name 'a\"b\\n[task]' is not one the build takes")
    assert not (tmp_path / "p").exists()


def test_palette_pngs_with_transparency_print_no_warning(tmp_path):
    """Pillow warns on converting them ("Palette images with Transparency ..."): not on init's stderr."""
    data = tmp_path / "pal"
    data.mkdir()
    for i in range(3):
        im = Image.new("P", (8, 8))
        im.putpalette([0, 0, 0, 255, 255, 255] * 128)
        im.save(data / f"{i}.png", transparency=b"\x00\x80")
    res = run_cli("init", str(tmp_path / "p"), "--factory", "m:Net", "--input", "x:-1,3,8,8", "--data", str(data))
    assert res.returncode == 0 and res.stderr == "", res.stderr


def test_array_files_disagreeing_on_a_free_dimension_are_one_line(tmp_path):
    data = tmp_path / "arrs"
    data.mkdir()
    np.save(data / "a.npy", np.zeros((3, 1, 8), "float32"))
    np.save(data / "b.npy", np.zeros((3, 1, 16), "float32"))
    _fails(run_cli("init", str(tmp_path / "p"), "--factory", "m:Net", "--input", "x:-1,1,-1", "--data", str(data)),
           "b.npy's 'x' has samples of shape [1, 16], an earlier file [1, 8]")
    assert not (tmp_path / "p").exists()
