"""Renderers shared by several verb modules (the build summary: `build`, `run`)."""
from __future__ import annotations

import threading
from contextlib import contextmanager

from ..manifest import CacheSource, manifest_steps
from ..report import fmt
from ._common import console, escape


def print_build_summary(m: dict, out_dir, verdict: bool = True) -> None:
    """``verdict=False``: leave the INT8 verdict to ``--precision auto``'s own measurement."""
    from rich.table import Table

    from ..report.figure import is_classifier, task_figure

    con = console()
    t = Table(title=f"{m['name']} → {m['target']} ({m['backend']}, {m['precision']})", title_justify="left")
    t.add_column("step")
    t.add_column("cache")
    t.add_column("seconds", justify="right")
    steps = manifest_steps(m)
    for s in steps:
        t.add_row(s.pass_, s.source.label, f"{s.seconds:.2f}")
    con.print(t)
    a = m["artifact"]
    fs = m.get("float_size_bytes")
    v = m["verify"]
    s = Table(show_header=False, box=None, padding=(0, 2))
    s.add_column(style="bold")
    s.add_column()
    s.add_row("artifact", f"{out_dir}/{a['path']}  ({fmt.nbytes(a['size_bytes'])})")
    s.add_row("sha256", f"{a['sha256'][:12]}… (in full in manifest.json)")   # a row of its own: never split
    if fs and m["precision"] != "fp32":
        s.add_row("float size", f"{fmt.nbytes(fs)}  (float/{m['precision']} = {fs / a['size_bytes']:.2f}x)")
    s.add_row("build time", f"{sum(st.seconds for st in steps):.1f}s "
              f"({sum(st.hit for st in steps)}/{len(steps)} steps cached)")
    status_style = {"passed": "green", "failed": "red"}.get(v["status"], "yellow")
    s.add_row("verify", f"[{status_style}]{v['status']}[/{status_style}]"
              + (f" on the host ({v['runtime']['name']} {v['runtime']['version']})" if v.get("runtime") else ""))
    fig = task_figure(v)
    if fig is not None:          # the task's own figure; top-1 only for a classifier
        s.add_row(fig.kind if fig.kind != "classification" else "accuracy", escape_text(fig.text()))
    if v.get("runtime"):
        if is_classifier(v) and v.get("top1_agreement") is not None:
            s.add_row("top-1 agreement", fmt.pct(v.get("top1_agreement")))
        s.add_row("max abs error", f"{fmt.num(v.get('max_abs_error'), '.3e')} (relative {fmt.num(v.get('rel_max_abs_error'), '.2e')})")
        s.add_row("cosine", fmt.num(v.get("cosine"), ".6f"))
    no_host = host_cannot_decide(m) if verdict and m["precision"] == "int8" else None
    verdict = host_verdict(m) if verdict and not no_host else None
    if verdict is not None:
        sp = m["int8_vs_fp32"]
        s.add_row("INT8 vs fp32", f"p50 {sp['fp32_p50_ms']:.3f} -> {sp['int8_p50_ms']:.3f} ms on the host "
                                  f"({sp['threads']} threads, interleaved, spinning off)")
    con.print(s)
    if verdict is not None:
        style = "green" if verdict.ship == "int8" else "yellow"
        con.print(f"[{style}]verdict (host stand-in): {verdict_text(m, verdict)}[/{style}]", soft_wrap=False)
    if no_host:
        con.print(f"verdict: {no_host}", style="yellow", markup=False, soft_wrap=False)
    if v["status"] == "device-only":
        con.print("[dim]verify: device-only — the host cannot run this artifact; "
                  "`edgeforge bench` measures it on the board[/dim]", soft_wrap=False)
    applied = [r for r in m.get("rewrites", []) if r.get("ops")]
    if applied:
        con.print("legalize rewrites: " + ", ".join(f"{r['rewrite']} ({r['ops']} ops)" for r in applied),
                  soft_wrap=False)
    odd = (m.get("quantization") or {}).get("float_weights") or []
    if odd:
        from ..quant.ptq_weights import describe

        con.print(describe(odd), markup=False, soft_wrap=False)
    nms = (m.get("nms") or {}).get("postprocess")
    if nms and nms.get("op") == "matrix_nms":
        con.print(f"NMS: matrix_nms out of the graph (ONNX has none); the runner does it on the device "
                  f"(score > {nms.get('score_threshold', 0.05):g}, decayed > {nms.get('post_threshold', 0.05):g}, "
                  f"keep {nms.get('keep_top_k', 100)})", markup=False, soft_wrap=False)
    elif nms:
        con.print(f"NMS: out of the graph (the target's runtime has none); the runner does it on the device "
                  f"(score > {nms['score_threshold']:g}, IoU {nms['iou_threshold']:g}, keep {nms['keep_top_k']})",
                  markup=False, soft_wrap=False)
    dets = v.get("detections")
    if dets and dets.get("map50_vs_float") is not None:
        con.print(f"detections vs Paddle Inference float: mAP@0.5 {dets['map50_vs_float']:.3f}, {dets['matched']} of "
                  f"{dets['float_boxes']} boxes matched, score error {fmt.num(dets.get('score_error'), '.1e')}",
                  markup=False, soft_wrap=False)
    batches = v.get("batches")
    if batches:
        con.print("verify at batch " + ", ".join(
            f"{r['batch']}: mAP@0.5 vs float {r['map50_vs_float']:.3f}" if r.get("map50_vs_float") is not None
            else f"{r['batch']}: skipped" for r in batches["runs"]), markup=False, soft_wrap=False)
    fallback = (m.get("export") or {}).get("route_fallback")
    if fallback:
        con.print(f"program route: {fallback['to']} (the {fallback['from']} route failed: "
                  f"{fallback['reason'][:200]})", style="yellow", markup=False, soft_wrap=False)
    ab = m.get("accuracy_budget")
    if ab and (len(ab.get("attempts") or []) > 1 or ab.get("stopped")):
        def fig(r):       # the budget's own measure: points of accuracy or of the task metric, or cosine
            return (f"drop {r['accuracy_drop']:.2f} points" if r.get("accuracy_drop") is not None
                    and ab.get("criterion", "accuracy_drop") != "cosine" else f"cosine {r['cosine']:.4f}")
        first = ab["attempts"][0]
        msg = (f"accuracy budget ({ab.get('describe') or ab['budget_points']}): plain INT8 ({first['algo']}) "
               f"{fig(ab['initial'])}; {ab['algo']} calibration, {len(ab['keep_float'])} of "
               f"{ab.get('quantizable_layers') or '?'} layer(s) in float -> {fig(ab['final'])}")
        if ab["keep_float"]:
            shown = ", ".join(ab["keep_float"][:6]) + (", …" if len(ab["keep_float"]) > 6 else "")
            msg += f" ({shown})"
        msg += float_cost(ab.get("cost") or {})
        tried = ab["attempts"]
        msg += (f"; search: {len(tried)} candidate(s), {sum(1 for a in tried if a.get('screened'))} "
                f"ruled out on a subset, {ab.get('seconds', 0):.0f}s")
        if ab.get("stopped") == "max_seconds":
            msg += (f", stopped at max_seconds {ab.get('max_seconds'):g}: "
                    + ("the best within the budget ships" if ab["met"] else "none within the budget"))
        from rich.markup import escape

        con.print(escape(msg) if ab["met"] else f"[red]{escape(msg)} — budget still missed[/red]",
                  soft_wrap=False)
    elif m.get("keep_float"):
        con.print("kept in float: " + ", ".join(m["keep_float"]), soft_wrap=False)
    fk = (m.get("quantization") or {}).get("fast_kl") or {}
    if fk and not fk.get("enabled", True):
        con.print(f"[yellow]fast KL off: {escape_text(fk.get('reason') or '?')}; "
                  "Paddle's own KL search ran (much slower)[/yellow]", soft_wrap=False)
    arith = (m.get("quantization") or {}).get("arithmetic") or {}
    if arith.get("host_kernels") == "unsound":
        probe = arith.get("probe") or {}
        con.print(escape_text(f"verify judged INT8 by the graph's exact QDQ arithmetic, as the target's runtime "
                              f"computes it: onnxruntime {probe.get('onnxruntime', '?')}'s own INT8 kernels on "
                              "this host's CPU miscompute QLinearConv (onnxruntime#26324)"),
                  style="dim", soft_wrap=False)
    qat = m.get("qat") or {}
    if qat.get("entered"):
        con.print(escape_text(f"QAT ({qat.get('steps')} steps, {qat.get('seconds')}s): shipped "
                              f"{qat['shipped'].upper()}: {qat['why']}"), soft_wrap=False)
    for line in prune_lines(m.get("prune")):
        con.print(escape_text(line), soft_wrap=False)
    if m.get("calibration_search"):
        con.print("calibration search: " + ", ".join(
            f"{r['algo']} " + (f"drop {r['accuracy_drop']:.2f} " if r.get("accuracy_drop") is not None else "")
            + f"cos {r['cosine']:.4f}" for r in m["calibration_search"])
            + f" -> {m['quantization']['algo']}", soft_wrap=False)


def prune_lines(rec: dict | None) -> list[str]:
    """The prune record as summary lines (each under 80 columns): FLOPs, size, host latency,
    the metric before and after."""
    if not rec:
        return []
    lines = [f"pruned: FLOPs {rec['flops_before'] / 1e6:.1f}M -> {rec['flops_after'] / 1e6:.1f}M "
             f"(-{rec['flops_removed']:.1%}), params {rec['params_before'] / 1e6:.2f}M -> "
             f"{rec['params_after'] / 1e6:.2f}M",
             f"pruned: float size {rec['size_before'] / 1e6:.2f} -> {rec['size_after'] / 1e6:.2f} MB; "
             f"{rec['steps']} fine-tune steps in {rec['seconds']:.1f}s"]
    host = rec.get("host") or {}
    if host:
        lines.append(f"pruned: host p50 {host['before_p50_ms']:.3f} -> {host['after_p50_ms']:.3f} ms "
                     "(Paddle Inference here)")
    if "accuracy_before" in rec:
        lines.append(f"pruned: accuracy {rec['accuracy_before']:.2%} -> {rec['accuracy_after']:.2%} "
                     f"(budget: {rec['budget']})")
    else:
        lines.append(f"pruned vs unpruned: {rec['figure']} (budget: {rec['budget']})")
    return lines


def escape_text(text: str) -> str:
    from rich.markup import escape

    return escape(str(text))


def host_cannot_decide(m: dict) -> str | None:
    """Why the host's timing may not decide for the build ``m`` (contracts.host_can_time on its
    target), or None where it may."""
    from ..contracts import needs_device
    from ..errors import EdgeforgeError
    from ..targets import load_target

    try:
        profile = load_target(m["target"])
    except EdgeforgeError as exc:
        return f"its target profile does not load ({exc.one_line()})"
    return needs_device(profile, m["backend"])


def host_verdict(m: dict):
    """The INT8 verdict of a build from its host timing (compare's statistics on the interleaved
    samples, verify's accuracy), or None where the host did not time it."""
    sp = m.get("int8_vs_fp32")
    if not sp:
        return None
    from ..report.int8_procedure import decide
    from ..report.verdict import int8_verdict

    from ..report.figure import task_figure

    v = m["verify"]
    c = decide(sp["fp32_samples_ms"], sp["int8_samples_ms"])
    fig = task_figure(v)
    drop = fig.drop if fig is not None else None
    return int8_verdict(c, accuracy_drop=drop, cosine=None if drop is not None else v.get("cosine"),
                        within_budget=v["status"] == "passed" if v.get("runtime") else None,
                        where="on the host", metric=fig.name if fig is not None else "accuracy")


def verdict_text(m: dict, verdict) -> str:
    """The verdict line, and, when INT8 loses, that no variant tried beats fp32 and what
    ``--precision auto`` picks."""
    if verdict.ship == "int8":
        return verdict.line
    tried = (m.get("accuracy_budget") or {}).get("speed") or []
    fp32 = m["int8_vs_fp32"]["fp32_p50_ms"]
    beats = [t for t in tried if t["p50_ms"] < fp32 * 0.99]
    if verdict.speed == "faster":
        return verdict.line
    if beats:
        return f"{verdict.line}; --precision auto picks fp32"
    return (f"{verdict.line}; none of the {max(len(tried), 1)} INT8 variant(s) tried beats fp32 "
            "here: --precision auto picks fp32")


def float_cost(cost: dict) -> str:
    """What the float layers cost against plain INT8, signs as a reader expects them:
    size + is larger, p50 + is slower."""
    if not cost:
        return ""
    size = f"size {cost['size_delta_bytes'] / 1024:+.1f} KB"
    if cost.get("p50_ms") is None:
        return f"; cost vs plain INT8: {size} ({cost['latency_note']})"
    d = cost["p50_ms"] - cost["p50_ms_int8"]
    return (f"; cost vs plain INT8: {size}, p50 {d:+.3f} ms ({'slower' if d > 0 else 'faster'}: "
            f"{cost['p50_ms_int8']:.3f} -> {cost['p50_ms']:.3f} ms, {cost['latency_note']})")


def print_decision(record: dict, out_dir) -> None:
    """``--precision auto``: each candidate's p50 and verdict against fp32, then the choice."""
    from rich.markup import escape

    con = console()
    where = "host stand-in" if record.get("where") == "host" else (
        f"device {record['where']}" if record.get("where") else "not measured")
    fp32 = next((c for c in record["candidates"] if c["precision"] == "fp32"), None)
    for c in record["candidates"]:
        if c["p50_ms"] is None:
            con.print(f"  {c['precision']}: verify {c['verify']}, not measured", markup=False)
            continue
        ratio = f", {fp32['p50_ms'] / c['p50_ms']:.2f}x fp32" if fp32 and c is not fp32 else ""
        verdict = f", {c['compare']['verdict']}" if c.get("compare") else ""
        con.print(f"  {c['precision']}: p50 {c['p50_ms']:.3f} ms{ratio}{verdict}, verify {c['verify']}",
                  markup=False)
    con.print(f"[bold]precision auto[/bold] ({escape(where)}): [bold]{escape(record['chosen'])}[/bold] — "
              f"{escape(record['reason'])}", soft_wrap=False)
    con.print(f"decision: {out_dir}/decision.json", markup=False)


def say_wrapped(text: str, indent: str = "") -> None:
    """One message, wrapped at 80 columns (continuation lines indented under it)."""
    import textwrap

    lines = textwrap.wrap(text, 80, initial_indent=indent, subsequent_indent=indent + "  ",
                          break_on_hyphens=False, break_long_words=False)
    console().print(escape("\n".join(lines)))


# ---------------------------------------------------------------- progress

class Spinners:
    """The one progress display: one spinner line per key on stderr, started on the first
    line, thread-safe (a fleet updates it from several threads)."""

    def __init__(self, quiet: bool, transient: bool = False):
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.table import Column

        # the description folds, the elapsed time never shrinks (without a TTY rich would
        # otherwise cut it to "0…" for a long line)
        con = console(stderr=True)
        # transient lines are for a terminal: piped, nothing at all (not even rich's blank line)
        quiet = quiet or (transient and not con.is_terminal)
        self._progress = Progress(SpinnerColumn(),
                                  TextColumn("{task.description}",
                                             table_column=Column(ratio=1, overflow="fold")),
                                  TimeElapsedColumn(table_column=Column(no_wrap=True, min_width=7)),
                                  console=con, transient=transient, disable=quiet,
                                  redirect_stdout=False, redirect_stderr=False)
        self._tasks: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def last(self) -> str | None:
        return next(reversed(self._tasks), None)

    def show(self, key: str, text: str, *, done: bool = False, markup: bool = False) -> None:
        desc = text if markup else escape(text)
        with self._lock:
            if not self._tasks:
                self._progress.start()
            if key not in self._tasks:
                self._tasks[key] = self._progress.add_task(desc, total=None)
            else:
                self._progress.update(self._tasks[key], description=desc)
            if done:
                self._progress.update(self._tasks[key], total=1, completed=1)

    def finish(self, *, except_key: str | None = None) -> None:
        with self._lock:
            for key, tid in self._tasks.items():
                if key != except_key:
                    self._progress.update(tid, total=1, completed=1)

    def close(self) -> None:
        if self._tasks:
            self.finish()
            self._progress.stop()


@contextmanager
def spinners(quiet: bool, transient: bool = False):
    """``transient``: the lines vanish at the end (a table that follows repeats them)."""
    s = Spinners(quiet, transient)
    try:
        yield s
    finally:
        s.close()


@contextmanager
def step_progress(quiet: bool):
    """Yields on_step(step, message): one line per step; a new step completes the others."""
    with spinners(quiet) as s:
        def on_step(step: str, message: str):
            s.finish(except_key=step)
            s.show(step, f"{step}: {message}")

        yield on_step


@contextmanager
def fleet_progress(quiet: bool):
    """Yields on_step(device, step, message): one line per device."""
    final = {"done", "failed", "busy", "skipped"}
    with spinners(quiet) as s:
        def on_step(device: str, step: str, message: str):
            s.show(device, f"{device}: {step}: {message}" if message else f"{device}: {step}",
                   done=step in final)

        yield on_step


@contextmanager
def build_progress(quiet: bool):
    """Yields (on_event, log) for api.build: one line per pass, with its time or 'cached', while
    it runs (the build summary's step table says it after)."""
    with spinners(quiet, transient=True) as s:
        def on_event(name, phase, info):
            if info.get("wait"):        # waiting on another build's lock: said once, and it stays
                if phase == "start" and not quiet:
                    console(stderr=True).print(name, markup=False)
                return
            if phase == "start":
                s.show(name, name)
            else:
                source = CacheSource(info["source"])
                note = ({CacheSource.REMOTE: "remote hit"}.get(source, "cached") if source.hit
                        else f"{info['seconds']:.1f}s")
                s.show(name, f"{escape(name)} [dim]({note})[/dim]", done=True, markup=True)

        def log(msg):
            if s.last:
                s.show(s.last, f"{escape(s.last)}: [dim]{escape(msg)}[/dim]", markup=True)

        yield on_event, log
