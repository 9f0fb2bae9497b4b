"""verify: a numeric check on the host wherever the host can run the artifact.

It runs the float program under Paddle Inference on the evaluation set (the reference), runs the
artifact with the host runtime (onnxruntime; Paddle Lite x86 for float x86 builds), and compares
them with the same code the on-device runner uses. An ARM ``.nb`` is marked ``device-only``; its
reference data still ships so the device runner can measure drift there.
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
from pydantic import Field

from ..cache import sha256_file
from ..contracts import host_arithmetic
from ..errors import ConfigError, PassError
from ..paddle_env import paddle_inference
from ..quant.arithmetic import predictor
from ..runner.limits import E2E_MAX_IMAGE_BYTES
from ..runner.metrics import drift_metrics
from ..runner.predictors import predict_all
from .base import LITE_NB, ONNX, PADDLE_FLOAT, VERIFIED, Artifact, Pass, PassConfig, PassContext, register
from . import verify_shapes as shapes
from .reference_data import write_device_reference
from .lite import lite_outputs
from .verify_batches import float_detections, has_nms_rows


UNFOLDED = ("decode", "resize", "resize_short", "crop")     # fold = true: the steps left to the app


class VerifyConfig(PassConfig):
    host_runnable: bool = True
    max_accuracy_drop: float = Field(1.0, ge=0)      # points, when labels exist
    min_cosine: float = 0.99                           # INT8/FP16 without labels
    float_rel_tolerance: float = 1e-4                  # float artifacts vs Paddle Inference
    data_digest: str = ""
    task: Optional[dict] = None                        # [task], as declared (part of the key)
    preprocess: Optional[dict] = None                  # [preprocess], as declared
    postprocess: Optional[dict] = None                 # [postprocess], as declared
    images_digest: str = ""                            # its images


@register
class VerifyPass(Pass):
    name = "verify"
    version = 5                 # 5: carries an INT8 build's fp32 sibling
    consumes = frozenset({LITE_NB, ONNX})
    produces = VERIFIED
    needs = frozenset({PADDLE_FLOAT})      # the float model: the reference the artifact is judged by
    Config = VerifyConfig

    def target_facts(self, ctx: PassContext):
        facts = {"backend": ctx.backend}
        if ctx.backend == "onnx":
            ep, rules = ctx.target.backend_config("onnx").first_provider()
            facts["rules"] = {ep: rules.model_dump(mode="json")}
            facts["arithmetic"] = host_arithmetic(ctx.target, ctx.backend, ctx.precision)["kind"]
        return facts

    def check_contract(self, model: Path, ctx: PassContext) -> dict:
        """The artifact against its target's first execution provider's rules; a violation fails
        the build (exit 3) naming the node."""
        from ..contracts import check_graph, check_qdq, describe, host_cpu_flags, int8_flags, summary

        ep, rules = ctx.target.backend_config("onnx").first_provider()
        found = check_graph(model, rules) + check_qdq(model, rules)
        record = {"provider": ep, "status": "failed" if found else "passed", "violations": len(found),
                  **summary(model), "host_cpu_flags": int8_flags(host_cpu_flags())}
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise PassError(self.name, describe(found[0], ep) + more,
                            hint=f"quantize for {ep}'s scheme (targets/{ctx.target.name}.toml "
                                 "[backend.onnx.scheme]) or drop it from the front of execution_providers")
        ctx.log(f"{ep} rules: {record['quantize_linear']} QuantizeLinear, zero points "
                f"{'all 0' if not record['zero_points_nonzero'] else 'not all 0'}: passed")
        return record

    def task_record(self, task, outs, reference, labels: dict, ctx: PassContext, cut_nms: dict | None) -> dict:
        """``verify.task``: the task metric of the float model and of the artifact (``outs``;
        None when the host cannot run it: only the float figure). ``cut_nms``: the NMS convert
        moved out of the graph ([backend.onnx] nms), from the input's meta."""
        from ..task.evaluate import evaluate
        from ..task.user import user_metric

        spec = (self.config.task or {}).get("metric")
        user = user_metric(ctx.project.root, spec, ctx.workdir / "verify-metric.log") if spec else None
        post, how = self.declared_post(task), {}
        if cut_nms is not None:     # the artifact ends before its NMS; the float program has it
            post = cut_nms
        if post is not None:        # the answers of the runner's post-processing are compared
            from ..task.post import answer_figures, answers_of, nms_rows

            try:
                outs = None if outs is None else answers_of(outs, post)
                reference = nms_rows(reference) if cut_nms is not None else answers_of(reference, post)
            except (ValueError, IndexError) as exc:
                raise PassError(self.name, f"[postprocess] op = \"{post['op']}\": {exc}",
                                hint="check [postprocess] (output indices) in edgeforge.toml") from None
            how = {"figures_of": answer_figures}
        try:
            rec = evaluate(task, outs if outs is not None else reference, reference, labels, user, spec or "",
                           **how)
        except ValueError as exc:
            if self.config.task is not None:
                raise PassError(self.name, f"[task] kind = \"{task.kind}\": {exc}",
                                hint="check [task] and [data] label_output in edgeforge.toml") from None
            return {"kind": task.kind, "metric": None, "float": None, "artifact": None, "drop": None,
                    "skipped": str(exc)}
        if post is not None:
            rec["postprocess"] = post["op"]
        # what bench needs to compute the same record from the device's outputs
        if self.config.task is not None or post is not None:
            rec["settings"] = {**dataclasses.asdict(task), "metric": spec, "project": str(ctx.project.root),
                               **({"postprocess": post} if post is not None else {}),
                               **({"float_nms_in_graph": True} if cut_nms is not None else {})}
        if outs is None:
            rec.update(artifact=None, drop=None)
            rec["figures"].pop("artifact", None)
        drop = "" if rec["drop"] is None else f", drop {rec['drop']:.2f} points"
        ctx.log(f"task {task.kind}: {rec['metric']} float {rec['float']}, artifact {rec['artifact']}{drop}")
        return rec

    def batch_check(self, run, feeds: dict, float_dir: Path, task, precision: str, cut_nms: dict | None) -> dict:
        """``verify.batches``: the detections at batch 1 and 4 against the float model's (fp32)
        or the artifact's own at one batch (INT8) (:mod:`.verify_batches`)."""
        from ..task.evaluate import detections
        from ..task.post import answers_of, nms_rows
        from .verify_batches import detection_batches, per_image

        post = cut_nms or self.declared_post(task)

        def answers(outs, is_float: bool):
            if post is None:
                return detections(outs)
            return per_image(nms_rows(outs) if is_float and cut_nms is not None else answers_of(outs, post))

        limit = (self.config.task or {}).get("max_metric_drop")
        limit = self.config.max_accuracy_drop if limit is None else limit
        if precision == "fp32":
            return detection_batches(run, feeds, lambda sub: paddle_inference(float_dir, sub), answers, limit,
                                     task.score_threshold)
        return detection_batches(run, feeds, lambda sub: predict_all(run, sub, len(next(iter(sub.values())))),
                                 answers, limit, task.score_threshold, truth_is_float=False)

    def fold_check(self, fold: dict, feeds: dict, reference: list, outs, ctx: PassContext) -> dict:
        """fold = true: the folded float program and the artifact against the unfolded model (the
        factory's layer on the unfolded tensors). The folded program must give the unfolded
        model's outputs (float_rel_tolerance), else the build fails (exit 3)."""
        from .fold import compare, unfolded_outputs

        plain = unfolded_outputs(ctx.project, fold, feeds, ctx.workdir / "verify-unfolded.log")
        program = compare(reference, plain)
        record = {"input": {"name": fold["input"], "dtype": "uint8", "layout": "NHWC"},
                  "unfolded_input": {"shape": fold["shape"], "layout": fold["layout"]},
                  "program_vs_unfolded": program,
                  "artifact_vs_unfolded": compare(outs, plain) if outs is not None else None}
        if program["rel_max_abs_error"] > self.config.float_rel_tolerance:
            raise PassError(self.name, f"the folded program differs from the unfolded model by "
                                       f"{program['rel_max_abs_error']:.2e} (relative)",
                            hint="report it: fold = false feeds the pre-processed tensor instead")
        a = record["artifact_vs_unfolded"]
        ctx.log("fold: folded program vs unfolded model rel {:.2e}".format(program["rel_max_abs_error"])
                + ("" if a is None else f"; artifact vs unfolded rel {a['rel_max_abs_error']:.2e}, "
                                        f"cosine {a['cosine']:.6f}"))
        return record

    def answer_task(self, task, ctx: PassContext, cut_nms: dict | None):
        """The task the answers are judged as: a generic one (no ``[task]``, no 1-D labels) whose
        NMS the convert moved out of the graph (``[backend.onnx] nms = "postprocess"``) gives
        detections on both sides, so it is judged by them (mAP vs float), not by a cosine."""
        if task.kind != "generic" or cut_nms is None:
            return task
        ctx.log(f"no [task] kind: the outputs go through {cut_nms['op']}, judged as detections")
        return dataclasses.replace(task, kind="detection")

    def declared_post(self, task) -> dict | None:
        """The declared [postprocess] as pipeline.json holds it (None: none declared)."""
        from ..task.post import check, resolve

        if self.config.postprocess is None or self.config.postprocess.get("op") == "none":
            return None
        post = resolve(self.config.postprocess, self.config.task)
        bad = check(post, task.kind)
        if bad:
            raise ConfigError(bad, hint="match [task] kind, or drop [postprocess]")
        return post

    def carry_images(self, out_dir: Path, ctx: PassContext) -> list[str]:
        """The [preprocess] images (at most 16), copied under reference/images/ for bench
        --end-to-end: their paths in the build."""
        from ..task import parity

        folder = ctx.project.path(self.config.preprocess["images"])
        dest = out_dir / "reference" / "images"
        dest.mkdir(parents=True, exist_ok=True)
        rels = []
        for i, p in enumerate(parity.images(folder) if folder.is_dir() else []):
            if p.stat().st_size > E2E_MAX_IMAGE_BYTES:
                raise ConfigError(f"[preprocess] images: {p} is over {E2E_MAX_IMAGE_BYTES >> 20} MB",
                                  hint="the images travel with the build to the device: use smaller ones")
            name = f"image_{i:02d}{p.suffix.lower()}"
            shutil.copyfile(p, dest / name)
            rels.append(f"reference/images/{name}")
        return rels

    def preprocess_parity(self, float_dir: Path, ctx: PassContext) -> dict:
        """[preprocess] against its reference: tensors, then the float model's outputs on both.
        A difference fails the build (exit 3) naming the stage."""
        from ..task import parity

        pre = self.config.preprocess
        names = [sp.name for sp in ctx.project.inputs]
        if pre["input"] not in names:
            raise ConfigError(f"[preprocess] input = \"{pre['input']}\" is not a model input "
                              f"({', '.join(names)})")
        folder = ctx.project.path(pre["images"])
        paths = parity.images(folder) if folder.is_dir() else []
        if not paths:
            raise ConfigError(f"[preprocess] images = \"{pre['images']}\": no JPEG/PNG files in {folder}")
        if not pre.get("reference"):
            return {"status": "unchecked", "images": len(paths), "reason": "no [preprocess] reference"}
        ref = parity.reference(ctx.project.root, pre["reference"], paths, ctx.workdir / "verify-reference.log")
        try:
            record = parity.check(pre, paths, ref, pre["tolerance"])
        except parity.ParityError as exc:
            raise PassError(self.name, str(exc), hint=f"fix [preprocess] in edgeforge.toml to match "
                                                      f"{pre['reference']}") from None
        if len(names) == 1 and not pre.get("fold"):     # folded: the fold check compares outputs
            mine = paddle_inference(float_dir, {names[0]: np.stack(parity.declared(pre, paths))})
            theirs = paddle_inference(float_dir, {names[0]: np.stack(ref)})
            record["output_max_abs_diff"] = max(float(np.max(np.abs(a - b))) for a, b in zip(mine, theirs))
        ctx.log(f"pre-processing parity on {len(paths)} images: max difference {record['max_abs_diff']:.3g}")
        return record

    def write_pipeline(self, out_dir: Path, ctx: PassContext, precision: str, cut_nms: dict | None) -> None:
        """pipeline.json: what an app needs next to the model (see docs/task.md)."""
        import json

        from ..task.parity import steps_of
        from ..task.post import resolve

        pre, task = self.config.preprocess, self.config.task or {}
        spec = next((sp for sp in ctx.project.inputs if pre and sp.name == pre["input"]), ctx.project.inputs[0])
        doc = {"schema": "edgeforge.pipeline/1",
               "input": {"name": spec.name, "dtype": spec.dtype, "shape": list(spec.shape),
                         "layout": ("NHWC" if pre.get("fold") else pre["layout"]) if pre else None},
               "preprocess": [st for st in steps_of(pre) if not pre.get("fold") or st["op"] in UNFOLDED]
                             if pre else [],
               **({"folded": [st for st in steps_of(pre) if st["op"] not in UNFOLDED]} if pre and pre.get("fold")
                  else {}),
               "postprocess": {**{k: task.get(k) for k in ("kind", "blank", "time_axis", "top_k", "score_threshold")
                                  if k in task}, **(cut_nms or resolve(self.config.postprocess, self.config.task))},
               "labels": list(task.get("label_names") or []),
               "precision": precision}
        (out_dir / "pipeline.json").write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        cfg: VerifyConfig = self.config
        # the NMS convert moved out of the graph ([backend.onnx] nms): this run's, never the pass's
        cut_nms = inp.meta.nms.postprocess if inp.meta.nms else None
        data = ctx.project.load_data("evaluation")
        names = [s.name for s in ctx.project.inputs]
        feeds = {k: data[k] for k in names}
        label_arrays = {k: v for k, v in data.items() if k not in names}
        task = self.answer_task(ctx.project.task(label_arrays), ctx, cut_nms)
        # the top-1 figures of the tensor check are a classifier's
        labels = data.get("labels") if task.kind == "classification" else None
        float_dir = ctx.needed(PADDLE_FLOAT, self.name).path
        ctx.log(f"Paddle Inference reference on {len(feeds[names[0]])} evaluation samples")
        reference = paddle_inference(float_dir, feeds)

        ref_dir = out_dir / "reference"
        ref_dir.mkdir()
        np.savez(ref_dir / "eval_inputs.npz", **feeds, **label_arrays)
        np.savez(ref_dir / "float_outputs.npz", **{f"output_{i}": o for i, o in enumerate(reference)})
        shipped = write_device_reference(out_dir, feeds, label_arrays, reference)
        preprocess = self.preprocess_parity(float_dir, ctx) if cfg.preprocess is not None else None
        artifact_file = inp.meta.file
        shutil.copy2(inp.path / artifact_file, out_dir / artifact_file)
        float_file = inp.meta.float_file      # an INT8 build's fp32 sibling (passes/base.py)
        if float_file and (inp.path / float_file).is_file():
            (out_dir / float_file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(inp.path / float_file, out_dir / float_file)
        precision = inp.meta.precision
        contract = self.check_contract(out_dir / artifact_file, ctx) if ctx.backend == "onnx" else None

        result = {"status": "device-only", "top1_agreement": None, "accuracy": None, "float_accuracy": None,
                  "accuracy_drop": None, "max_abs_error": None, "rel_max_abs_error": None, "cosine": None,
                  "runtime": None}
        k = ctx.project.spec.data.label_output
        if k >= len(reference):
            raise ConfigError(f"[data] label_output = {k}, but the model has {len(reference)} output(s)",
                              hint=f"use 0 to {len(reference) - 1} in edgeforge.toml")
        outs = None
        if cfg.host_runnable:
            if ctx.backend == "onnx":
                # the target's INT8 arithmetic, not the host CPU's (quant.arithmetic; manifest: arithmetic)
                arith = host_arithmetic(ctx.target, ctx.backend, precision)
                run = predictor(out_dir / artifact_file, arith)
                ctx.log(f"running {artifact_file} under onnxruntime on the host ({arith['kind']})")
                outs = predict_all(run, feeds)
                runtime = run.runtime
                result["arithmetic"] = arith
            else:
                # Paddle Lite aborts its process on some inputs: run it in a child.
                ctx.log(f"running {artifact_file} under Paddle Lite (x86) on the host")
                runtime, outs = lite_outputs(self.name, str(out_dir / artifact_file), names, feeds,
                                             ctx.workdir / "verify-lite.log")
            result["task"] = self.task_record(task, outs, reference, label_arrays, ctx, cut_nms)
            m = drift_metrics(outs, reference, labels)
            per_output = m.pop("outputs", [])
            if k:       # the accuracy figures are those of the output the labels are for
                m.update({f: per_output[k][f] for f in ("top1_agreement", "accuracy", "float_accuracy",
                                                         "accuracy_drop")})
            result.update(m, runtime=runtime)
            if len(per_output) > 1:
                result["outputs"] = per_output
            # judge on the worst output, not only the first
            worst_rel = max((o["rel_max_abs_error"] or 0.0) for o in per_output) if per_output else 0.0
            worst_cos = min((o["cosine"] for o in per_output if o["cosine"] is not None), default=1.0)
            t = result["task"]
            if task.kind == "detection" and cut_nms is None and has_nms_rows(reference):
                result["detections"] = float_detections(outs, reference, task.score_threshold)
            if precision == "fp32" and cut_nms is None and "detections" in result:
                ok, reason = result["detections"]["status"] == "passed", result["detections"].get("reason")
            elif precision == "fp32" and cut_nms is None:
                ok = worst_rel <= cfg.float_rel_tolerance
                reason = f"float output differs from Paddle Inference by {worst_rel:.2e} (relative)"
            elif (cfg.task is not None or cut_nms is not None) and t.get("drop") is not None:
                limit = (cfg.task or {}).get("max_metric_drop")
                limit = cfg.max_accuracy_drop if limit is None else limit
                ok = t["drop"] <= limit
                reason = f"{t['metric']} drop {t['drop']:.2f} points > budget {limit:g}"
            elif m.get("accuracy_drop") is not None:
                ok = m["accuracy_drop"] <= cfg.max_accuracy_drop
                reason = f"accuracy drop {m['accuracy_drop']:.2f} points > budget {cfg.max_accuracy_drop}"
            else:
                ok = worst_cos >= cfg.min_cosine
                reason = f"cosine {worst_cos:.4f} < {cfg.min_cosine}"
            if task.kind == "detection" and ctx.backend == "onnx":
                result["batches"] = self.batch_check(run, feeds, float_dir, task, precision, cut_nms)
                if ok and result["batches"]["status"] == "failed":
                    ok, reason = False, result["batches"]["reason"]
            result["status"] = "passed" if ok else "failed"
            if not ok:
                result["reason"] = reason
        else:
            # Float accuracy of the reference is still worth reporting.
            if labels is not None and reference[k].ndim == 2:
                result["float_accuracy"] = float(np.mean(reference[k].argmax(1) == labels))
            result["task"] = self.task_record(task, None, reference, label_arrays, ctx, cut_nms)
        # free dimensions: the artifact at min, opt and max of each declared range
        shapes.apply(result, shapes.check_shapes(self, out_dir / artifact_file, float_dir, feeds, precision, ctx))
        if ctx.project.fold is not None:
            result["fold"] = self.fold_check(ctx.project.fold, feeds, reference, outs, ctx)
        if contract is not None:
            result["contract"] = contract
        if preprocess is not None:
            result["preprocess"] = preprocess
        if cfg.preprocess is not None or cfg.task is not None or cfg.postprocess is not None or cut_nms:
            self.write_pipeline(out_dir, ctx, precision, cut_nms)
        meta = inp.meta.updated(verify=result, num_eval_samples=int(len(feeds[names[0]])))
        n = shipped["samples"]
        if outs is not None and n < meta.num_eval_samples:      # the device's figures, on the host
            shipped["host_drift"] = {k: v for k, v in drift_metrics(
                [o[:n] for o in outs], [r[:n] for r in reference],
                None if labels is None else labels[:n]).items() if k != "outputs"}
        meta.device_reference = shipped
        if cfg.preprocess is not None:
            meta.reference_images = self.carry_images(out_dir, ctx)
        meta.artifact_sha256 = sha256_file(out_dir / artifact_file)
        return meta

