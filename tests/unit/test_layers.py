"""The layers of docs/architecture.md: a module imports only from rows below its own (and from
its own package). Read from the source, lazy imports included (tests/import_graph.py)."""
from __future__ import annotations

import import_graph

# Row 0 has three steps inside it: errors and oserror, then fsutil (its errors are ConfigErrors),
# then cache (writes through fsutil).
ROWS = {
    "errors": 0, "oserror": 0, "paddle_env": 0, "runner": 0, "lite_child": 0, "edgeforge": 0,
    "quiet": 0,                         # native output to a step's log (stdlib only)
    "stop_signals": 0.1,                # the stop handlers kept after import paddle (errors' Stopped)
    "fsutil": 0.3, "cache": 0.6,
    "build_meta": 0.9,                  # the passes' meta models (pydantic only), read by quant/ too
    "config": 1, "native": 1, "weights": 1, "toolchain": 1, "results": 1, "quant": 1,
    "remote_settings": 1.1,             # the remote cache's URL/mode/timeout (config's strict model)
    "toolchain_web": 1.2,               # onnxruntime-web from npm, beside the toolchains dir
    "manifest": 1.2,                    # the build manifest's one model (config's DTypes, describe)
    "init_data": 1,
    "init_labels": 1.3,                 # init --task's labels (COCO, masks, CTC lines) into init_data's rows
    "init_toml": 2.5,                   # init's one edgeforge.toml writer, checked by project's model
    "task": 1.2,                        # task metrics (numpy); user metrics in a child (native)
    "inference": 1.5,                   # an exported program, read in a child (native)
    "fold_data": 1.5,                   # a folded input's data (task.parity's images, the runner's pipeline)
    "project": 2, "targets": 2, "report": 2, "remote_cache": 2,
    "contracts": 3, "options": 3,
    "passes": 4,
    "init": 4.5,                        # edgeforge init: a factory's InputSpecs through export's import
    "export_program": 4.6,              # edgeforge export: init's factory inputs, the export pass
    "plan": 4.8,                        # the build plan: passes by backend and precision
    "pipeline": 5,
    "api": 6,
    "lab": 6.5,                         # a labgrid lab: its inventory table, client, place holds
    "device": 7,                        # the package; its sub-packages are layers of their own:
    "device.link": 7,                   # talking to one device: inventory, transport, session, sync
    "device.browser": 7.05,             # a local headless Chromium: loopback server, chromedriver
    "device.provision": 7.1,            # making and equipping devices: setup, emulate, rootfs
    "device.measure": 7.2,              # bench, fleet, sweep, load
    "device.release": 7.4,              # deploy, releases (they bench canaries: measure)
    "device.workflow": 7.6,             # build + measure: --precision auto
    "doctor": 8,
    "cli": 9,
}
ISOLATED = ("runner", "lite_child")     # copied to devices / run in another interpreter


def _group(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 3 and parts[1] == "device":     # edgeforge.device.<layer>.<module>
        return f"device.{parts[2]}"
    return parts[1] if len(parts) > 1 else "edgeforge"


def test_every_module_has_a_row():
    missing = sorted({_group(m) for m in import_graph.modules()} - ROWS.keys())
    assert missing == [], f"give these a row in docs/architecture.md and ROWS: {missing}"


def test_no_module_imports_upwards():
    upward = []
    for module, deps in import_graph.graph().items():
        here = _group(module)
        for dep in deps:
            there = _group(dep)
            if there != here and ROWS.get(there, -1) >= ROWS.get(here, 99):
                upward.append(f"{module} -> {dep} (row {ROWS[here]} -> {ROWS[there]})")
    assert upward == [], "imports that go up or sideways:\n" + "\n".join(sorted(upward))


def test_the_runner_and_the_lite_child_import_nothing_from_edgeforge():
    g = import_graph.graph()
    leaks = sorted(f"{m} -> {d}" for m, deps in g.items() if _group(m) in ISOLATED
                   for d in deps if _group(d) != _group(m))
    assert leaks == []
