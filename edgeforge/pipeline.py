"""Runs passes in order: kind checks before anything runs, cache, timing, provenance."""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from .cache import Cache, build_code_digest, sha256_json
from .errors import EdgeforgeError, PassError
from .passes.base import Artifact, Pass, PassContext


@dataclass
class StepRecord:
    name: str
    version: int
    cache_hit: bool
    seconds: float
    key: str

    def to_json(self) -> dict:
        return {"pass": self.name, "version": self.version, "cache_hit": self.cache_hit,
                "seconds": round(self.seconds, 3), "cache_key": self.key}


def code_digest(p: Pass) -> str:
    """sha256 over edgeforge's build code (:data:`edgeforge.cache.BUILD_CODE`): an edited pass
    or helper never reuses stale outputs, even if nobody bumped a pass version."""
    return build_code_digest()[:16]


def check_chain(passes: Sequence[Pass], first_kind: str) -> None:
    """Each pass must accept what the one before produces. Raises before anything runs."""
    kind = first_kind
    for p in passes:
        if kind not in p.consumes:
            raise PassError(p.name, f"cannot take a '{kind}' artifact (it takes: {', '.join(sorted(p.consumes))})",
                            hint="the pipeline for this target/precision is mis-assembled")
        kind = p.produces


Event = Callable[[str, str, dict], None]   # (pass name, "start"|"done", info)


class Pipeline:
    def __init__(self, passes: Sequence[Pass], cache: Cache):
        self.passes = list(passes)
        self.cache = cache

    def run(self, source: Artifact, ctx: PassContext, on_event: Event | None = None) -> tuple[Artifact, list[StepRecord]]:
        check_chain(self.passes, source.kind)
        emit = on_event or (lambda *a: None)
        current = source
        ctx.history[source.kind] = source
        records: list[StepRecord] = []
        for p in self.passes:
            cfg = p.config.model_dump(mode="json")
            # The input is its bytes and the provenance it carries (meta flows downstream).
            input_digest = sha256_json({"content": current.digest, "meta": current.meta})
            key = self.cache.key(pass_name=p.name, version=f"{p.version}:{code_digest(p)}", config=cfg,
                                 target=p.target_facts(ctx), input_digest=input_digest)
            emit(p.name, "start", {"key": key})
            t0 = time.perf_counter()
            hit = self.cache.get(key)
            if hit is not None:
                path, meta = hit
                current = Artifact(p.produces, path, meta.get("meta", {}), meta["content_digest"])
                cache_hit = True
            else:
                if self.cache.enabled:      # a miss will be stored: check the cache before the pass runs
                    self.cache.check_writable()
                out_dir = ctx.workdir / f"{len(records):02d}-{p.name}"
                if out_dir.exists():
                    shutil.rmtree(out_dir)
                out_dir.mkdir(parents=True)
                try:
                    meta = p.run(current, out_dir, ctx) or {}
                except EdgeforgeError:
                    raise
                except Exception as exc:  # a bug or a library error inside a pass: re-raised as PassError
                    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
                    raise PassError(p.name, f"{type(exc).__name__}: {first[:300]}",
                                    hint="re-run with --debug for the traceback") from exc
                path, entry = self.cache.put(key, out_dir, {"pass": p.name, "version": p.version, "meta": meta})
                current = Artifact(p.produces, path, meta, entry["content_digest"])
                cache_hit = False
            ctx.history[current.kind] = current
            seconds = time.perf_counter() - t0
            records.append(StepRecord(p.name, p.version, cache_hit, seconds, key))
            emit(p.name, "done", {"cache_hit": cache_hit, "seconds": seconds})
        return current, records
