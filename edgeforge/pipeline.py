"""Runs passes in order: kind checks before anything runs, cache, timing, provenance.

A step's output is a function of its key. What a pass measures on the host (timings, the
host's CPU flags) is not part of that output: the meta models declare those fields
(``build_meta.measured``); they are split off its meta into a side record beside the cache
entry (``measured.json``, outside the content digest), kept out of the next step's key, and
merged back into the meta the next passes and the manifest read.
"""
from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from .build_meta import as_meta, merge_measured, split_measured
from .cache import Cache, build_code_digest, sha256_json
from .errors import EdgeforgeError, PassError
from .manifest import CacheSource
from .quiet import native_to_log
from .passes.base import Artifact, Pass, PassContext


@dataclass
class StepRecord:
    name: str
    version: int
    seconds: float
    key: str
    source: CacheSource = CacheSource.BUILT

    def to_json(self) -> dict:
        return {"pass": self.name, "version": self.version, "source": self.source.value,
                "seconds": round(self.seconds, 3), "cache_key": self.key}


def code_digest(p: Pass) -> str:
    """sha256 over edgeforge's build code (:data:`edgeforge.cache.BUILD_CODE`): an edited pass
    or helper never reuses stale outputs, even if nobody bumped a pass version."""
    return build_code_digest()[:16]


def check_chain(passes: Sequence[Pass], first_kind: str) -> None:
    """Each pass must accept what the one before produces, and find every kind it ``needs``
    made earlier in the chain. Raises before anything runs."""
    kind, made = first_kind, {first_kind}
    for p in passes:
        if kind not in p.consumes:
            raise PassError(p.name, f"cannot take a '{kind}' artifact (it takes: {', '.join(sorted(p.consumes))})",
                            hint="the pipeline for this target/precision is mis-assembled")
        missing = sorted(set(p.needs) - made)
        if missing:
            raise PassError(p.name, f"needs a '{missing[0]}' artifact that no step before it makes "
                                    f"(the chain makes: {', '.join(sorted(made))})",
                            hint="the pipeline for this target/precision is mis-assembled")
        kind = p.produces
        made.add(kind)


Event = Callable[[str, str, dict], None]   # (pass name, "start"|"done", info)


class Pipeline:
    """``cache.remote``, when set (:mod:`edgeforge.remote_cache`), is asked on a local miss
    (``fetch(key, cache, pass_name)``: the entry copied into the local cache, or None) and
    given each entry built here (``publish(key, cache, pass_name, measured)``); it never
    raises."""

    def __init__(self, passes: Sequence[Pass], cache: Cache):
        self.passes = list(passes)
        self.cache = cache

    def _lookup(self, key: str, name: str):
        hit = self.cache.get(key)
        if hit is not None:
            self.cache.count_event("local_hits")
            return hit, CacheSource.LOCAL
        remote = getattr(self.cache, "remote", None) if self.cache.enabled else None
        hit = remote.fetch(key, self.cache, name) if remote is not None else None
        if hit is not None:
            return hit, CacheSource.REMOTE
        self.cache.count_event("misses")
        return None, CacheSource.BUILT

    def run(self, source: Artifact, ctx: PassContext, on_event: Event | None = None) -> tuple[Artifact, list[StepRecord]]:
        check_chain(self.passes, source.kind)
        emit = on_event or (lambda *a: None)
        current = source
        ctx.history[source.kind] = source
        records: list[StepRecord] = []
        for p in self.passes:
            cfg = p.config.model_dump(mode="json")
            # The input is its bytes and the provenance it carries (meta flows downstream),
            # without what was measured on the host that built it; and the digest of each
            # artifact the pass needs besides it.
            content_meta = split_measured(current.meta)[0]
            needed = {kind: ctx.history[kind] for kind in sorted(p.needs)}
            input_digest = sha256_json({"content": current.digest, "meta": content_meta,
                                        **({"needs": {k: a.digest for k, a in needed.items()}} if needed else {})})
            key = self.cache.key(pass_name=p.name, version=f"{p.version}:{code_digest(p)}", config=cfg,
                                 target=p.target_facts(ctx), input_digest=input_digest)
            emit(p.name, "start", {"key": key})
            t0 = time.perf_counter()
            hit, source_kind = self._lookup(key, p.name)
            if hit is not None:
                path, entry = hit
                meta = as_meta(merge_measured(entry.get("meta", {}), entry.get("measured", [])))
                current = Artifact(p.produces, path, meta, entry["content_digest"])
            else:
                current = self._build(p, current, dataclasses.replace(ctx, inputs=needed), key, len(records))
            ctx.history[current.kind] = current
            seconds = time.perf_counter() - t0
            records.append(StepRecord(p.name, p.version, seconds, key, source_kind))
            emit(p.name, "done", {"source": source_kind, "seconds": seconds})
        return current, records

    def _build(self, p: Pass, current: Artifact, ctx: PassContext, key: str, index: int) -> Artifact:
        if self.cache.enabled:      # a miss will be stored: check the cache before the pass runs
            self.cache.check_writable()
        out_dir = ctx.workdir / f"{index:02d}-{p.name}"
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.mkdir(parents=True)
        try:
            # native libraries' lines go to the step's log beside its output, never the terminal
            with native_to_log(ctx.workdir / f"{index:02d}-{p.name}.log"):
                meta = as_meta(p.run(current, out_dir, ctx))
        except EdgeforgeError:
            raise
        except Exception as exc:  # a bug or a library error inside a pass: re-raised as PassError
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
            raise PassError(p.name, f"{type(exc).__name__}: {first[:300]}",
                            hint="re-run with --debug for the traceback") from exc
        content, measured = split_measured(meta)
        path, entry = self.cache.put(key, out_dir, {"pass": p.name, "version": p.version, "meta": content},
                                     measured=measured)
        remote = getattr(self.cache, "remote", None) if self.cache.enabled else None
        if remote is not None:
            remote.publish(key, self.cache, p.name, measured)
        return Artifact(p.produces, path, meta, entry["content_digest"])
