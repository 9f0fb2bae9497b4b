"""What a caller asks of a build or a bench, typed once and passed down whole.

- :class:`BuildOptions`: what ``edgeforge build`` takes (each ``None`` means "the target's";
  ``precision="auto"`` is a value of its own: build each precision the target allows and keep
  one, ``edgeforge.device.workflow.auto``). :meth:`BuildOptions.resolve` turns it, against a
  target (and the project), into a :class:`ResolvedBuild` in which every choice is made:
  backend (:func:`resolve_backend`, the one place that picks it), precision, calibration, the
  accuracy budget. What a target's runtime cannot run is the target's data
  (``[backend.<kind>.refuse.<precision>]``), refused by :func:`resolve_precision`.
- by concern, for the verbs that reach a device: :class:`ConnectionOptions` (inventory,
  timeouts, retries, host keys, the lease wait, and a lab place's :class:`LabOptions`),
  :class:`MeasureOptions` (runs, warm-ups, threads, power mode, profile, end-to-end), and
  :class:`BenchOptions`, a measuring verb's whole: a connection, a measurement, the results
  directory and the health switch. rollback, releases, ``devices check`` and ``setup`` take a
  ConnectionOptions only. The device-specific settings are resolved per build and device by
  :func:`edgeforge.device.link.settings.resolve_settings`.

Both are strict and frozen: an unknown option is refused, a derived one is
``opts.model_copy(update={...})``. ``BuildOptions.of(base, **overrides)`` is how the
keyword-style library calls (``api.build(p, t, precision="fp32")``) become one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .config import parse_model
from .errors import ConfigError
from .inference import pir_program
from .report.gates import GATE_NAMES, GateThresholds
from .targets import BackendKind, CalibrationAlgo, Precision, TargetProfile

PathLike = Union[str, Path]
RETRIES = 2                 # connect attempts after the first, for transient failures
# The bounds of every number a caller gives (flags and library calls alike; the runner on the
# device checks the same ones again): finite, and none absurdly large.
MAX_SECONDS = 86400.0       # timeouts and waits: a day
MAX_COUNT = 1_000_000       # timed runs, warm-ups, other counts
MAX_THREADS = 256           # runtime threads of one session (the runner's MAX_THREADS)
MAX_RETRIES = 100
MAX_PRIORITY = 100          # labgrid reservation priorities: 0 ... 100
LAB_WAIT_S = 600.0          # how long a lab device waits in labgrid's queue by default
_SECONDS = {"gt": 0, "le": MAX_SECONDS, "allow_inf_nan": False}


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @classmethod
    def of(cls, base=None, /, **overrides):
        """``base`` (or the defaults) with ``overrides``; a name of one of its parts (an
        options field, as ``BenchOptions.connection``) goes to that part, at any depth. An
        unknown name is a TypeError, as for any Python call, and a bad value a one-line
        ConfigError."""
        parts = cls._parts()
        routed: dict[str, dict] = {}
        for name in [n for n in overrides if n not in cls.model_fields]:
            owner = next((p for p, pc in parts.items() if name in pc.names()), None)
            if owner is None:
                raise TypeError(f"{cls.__name__}: unexpected option(s) {name}")
            routed.setdefault(owner, {})[name] = overrides.pop(name)
        for owner, values in routed.items():
            inner = overrides.get(owner, getattr(base, owner) if base is not None else None)
            overrides[owner] = parts[owner].of(inner, **values)
        if base is None and not overrides:
            return cls()
        data = {n: getattr(base, n) for n in cls.model_fields} if base is not None else {}
        return parse_model(cls, {**data, **overrides}, cls.__name__)

    @classmethod
    def _parts(cls) -> dict[str, type["_Options"]]:
        return {n: f.annotation for n, f in cls.model_fields.items()
                if isinstance(f.annotation, type) and issubclass(f.annotation, _Options)}

    @classmethod
    def names(cls) -> set[str]:
        """Every name ``of`` takes: the fields and, through them, their parts' names."""
        return set(cls.model_fields).union(*(p.names() for p in cls._parts().values()))


AUTO = "auto"


class BuildOptions(_Options):
    # None: the target's precision for the backend; "auto": each one the target allows, the
    # fastest within the accuracy budget kept (a choice among builds, not one build)
    precision: Union[Precision, Literal["auto"], None] = None
    backend: Optional[BackendKind] = None             # None: resolve_backend picks it
    algo: Optional[CalibrationAlgo] = None            # calibration algorithm (--calibration)
    max_accuracy_drop: Optional[float] = Field(None, ge=0, le=100)   # INT8 budget, points (labels)
    min_cosine: Optional[float] = Field(None, gt=0, le=1)    # INT8 budget without labels
    keep_float: Optional[list[str]] = None            # layers kept in float
    calibration_search: bool = False
    float_fallback: bool = True                       # on a missed budget: float layers
    max_search_seconds: Optional[float] = Field(None, gt=0, le=86400, allow_inf_nan=False)  # None: the project's
    qat: Optional[bool] = None                        # --qat / --no-qat; None: [quantization.qat] auto
    prune: Optional[float] = Field(None, gt=0, le=0.95, allow_inf_nan=False)  # --prune: FLOPs share; None: [prune]
    legalize: bool = True
    no_cache: bool = False
    cache_dir: Optional[PathLike] = None
    remote_cache: Optional[str] = None                # URL; None: $EDGEFORGE_REMOTE_CACHE, the user config
    remote_cache_mode: Optional[Literal["readwrite", "read", "off"]] = None
    remote_timeout: Optional[float] = Field(None, gt=0, le=3600, allow_inf_nan=False)  # s a request

    def resolve(self, target: TargetProfile, project=None) -> "ResolvedBuild":
        """Every choice made once, against ``target`` (and ``project``: its program format can
        pick the backend). Raises ConfigError for a backend the target lacks, a precision its
        runtime cannot run, or precision "auto" (several builds: ``device.workflow.auto``)."""
        if self.precision == AUTO:
            raise ConfigError("precision auto builds each precision the target allows and keeps one: "
                              "it is not one build", hint="edgeforge build --precision auto, or "
                              "edgeforge.device.workflow.auto.decide_on_host from Python")
        backend, reason = resolve_backend(target, self.backend, project)
        bcfg = target.backend_config(backend)          # looked up once: ResolvedBuild carries it
        q = target.quantization
        return ResolvedBuild(
            target=target, backend=backend, backend_config=bcfg, backend_reason=reason,
            precision=resolve_precision(target, backend, self.precision, bcfg),
            algo=self.algo or q.algo, algo_fixed=self.algo is not None,
            keep_float=tuple(self.keep_float if self.keep_float is not None else q.keep_float),
            max_accuracy_drop=(q.max_accuracy_drop if self.max_accuracy_drop is None
                               else self.max_accuracy_drop),
            min_cosine=q.min_cosine if self.min_cosine is None else self.min_cosine,
            calibration_search=self.calibration_search, float_fallback=self.float_fallback,
            max_search_seconds=self.max_search_seconds, qat=self.qat, prune=self.prune, legalize=self.legalize, use_cache=not self.no_cache, cache_dir=self.cache_dir,
            remote_cache=self.remote_cache, remote_cache_mode=self.remote_cache_mode,
            remote_timeout=self.remote_timeout)


@dataclass(frozen=True)
class ResolvedBuild:
    """A build with every choice made (see :meth:`BuildOptions.resolve`)."""

    target: TargetProfile
    backend: str
    backend_config: Any              # the target's [backend.<backend>] table, resolved once
    precision: str
    algo: str
    algo_fixed: bool                 # --calibration given: the fallback keeps that algorithm
    keep_float: tuple[str, ...]
    max_accuracy_drop: float         # the accuracy budget, resolved once
    min_cosine: float
    calibration_search: bool
    float_fallback: bool
    qat: bool | None                 # True: --qat, False: --no-qat, None: the project's auto
    prune: float | None              # --prune: the FLOPs share to remove; None: the project's [prune]
    legalize: bool
    use_cache: bool
    cache_dir: PathLike | None
    remote_cache: str | None = None        # the remote cache (edgeforge.remote_cache resolves it)
    max_search_seconds: float | None = None  # --max-search-seconds; None: [quantization] max_seconds
    remote_cache_mode: str | None = None
    remote_timeout: float | None = None
    backend_reason: str | None = None      # why resolve_backend picked it (None: asked, or the target's)

    @property
    def valid_targets(self) -> list[str]:
        return list(getattr(self.backend_config, "valid_targets", []))


def resolve_backend(target: TargetProfile, backend: str | None = None, project=None) -> tuple[str, str | None]:
    """The one place a build's backend is picked: the one asked for, else the target's default;
    and the one line saying why when edgeforge chose it for the input (None otherwise). A PIR
    program (``project``'s exported model is ``.json``) goes to the target's ONNX backend when
    its default is Paddle Lite (which reads only legacy programs) and it offers ONNX (rpi4, rpi5,
    android-arm64). A backend asked for is kept (a PIR program for Lite is refused later,
    ``passes.export.routes_for``)."""
    chosen = backend or target.backend.default
    if backend is not None or project is None or chosen != "lite" or "onnx" not in target.backends():
        return chosen, None
    model = pir_program(project)
    if model is None:
        return chosen, None
    return "onnx", f"backend: onnx, not lite: {model.name} is PIR, Paddle Lite reads only .pdmodel"


def resolve_precision(target: TargetProfile, backend: str, precision: str | None, bcfg=None) -> str:
    """The precision asked for, else the target's for ``backend``; refuses (the target's
    ``[backend.<kind>.refuse.<precision>]``) what its runtime cannot run correctly. ``bcfg``:
    the backend's config when the caller has it already."""
    chosen = precision or target.precision_for(backend)
    bcfg = bcfg if bcfg is not None else target.backend_config(backend)
    refusal = bcfg.refuse.get(chosen)
    if refusal is not None:
        raise ConfigError(refusal.reason, hint=refusal.hint)
    return chosen


class GateOptions(_Options):
    """The quality gates asked for, read once from the flags
    (``edgeforge.cli._common.gate_options``) and passed down whole: the typed thresholds
    (:class:`~edgeforge.report.gates.GateThresholds`), ``force`` (latency gates over emulated
    runs anyway) and the ``junit`` file. ``GateOptions.of(max_p50_ms=5)`` routes a threshold's
    name to ``thresholds``."""

    thresholds: GateThresholds = GateThresholds()
    force: bool = False                           # latency gates over emulated runs anyway
    junit: Optional[PathLike] = None              # also write JUnit XML here

    @classmethod
    def of(cls, base=None, /, **overrides):
        limits = {k: overrides.pop(k) for k in [k for k in overrides if k in GATE_NAMES]}
        if limits:
            current = overrides.get("thresholds", base.thresholds if base is not None else GateThresholds())
            overrides["thresholds"] = dataclasses.replace(current, **limits)
        return super().of(base, **overrides)

    @property
    def requested(self) -> bool:
        return self.thresholds.requested


def _as_seconds(v):
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


class LabOptions(_Options):
    """A lab device's place in labgrid's queue (``--priority``, ``--wait-timeout``)."""

    priority: int = Field(0, ge=0, le=MAX_PRIORITY)   # the reservation's priority
    wait_timeout: float = Field(LAB_WAIT_S, **_SECONDS)  # for the place in the queue

    _seconds = field_validator("wait_timeout", mode="before")(_as_seconds)


class ConnectionOptions(_Options):
    """How a verb reaches a device, the same for every verb that does (one
    :class:`edgeforge.device.link.session.Session`): the inventory, timeouts, connect retries,
    the host-key policy, the lease wait and, for a lab device, its place in the queue. rollback,
    releases and ``devices check``/``setup`` take this and nothing else."""

    inventory: Optional[PathLike] = None
    timeout: Optional[float] = Field(None, **_SECONDS)    # seconds for each command on the device
    connect_timeout: Optional[float] = Field(None, **_SECONDS)
    retries: int = Field(RETRIES, ge=0, le=MAX_RETRIES)   # connects after a transient failure
    trust_new_host: bool = False
    wait: float = Field(0.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)   # for a held lease
    lab: LabOptions = LabOptions()

    _seconds = field_validator("timeout", "connect_timeout", "wait", mode="before")(_as_seconds)


class MeasureOptions(_Options):
    """What a bench measures and how: runs, warm-ups, the runtime's threads and power mode, and
    the optional per-op profile and end-to-end stage timing (None: the build's or target's)."""

    runs: Optional[int] = Field(None, gt=0, le=MAX_COUNT)  # timed runs (default: the target's)
    warmups: Union[int, Literal["auto"], None] = None     # 'auto', a count, or the target's
    threads: Optional[int] = Field(None, gt=0, le=MAX_THREADS)   # override the build's runtime
    power_mode: Optional[str] = None
    profile: bool = False               # per-op profile on the device (bench --profile)
    end_to_end: bool = False            # time decode, pre-process, infer, post-process (bench --end-to-end)
    fp32_sibling: bool = True           # an INT8 build: time its fp32 sibling in interleaved rounds too

    @field_validator("warmups", mode="before")
    @classmethod
    def _warmups(cls, v):
        return None if v is None else parse_warmups(v)


class BenchOptions(_Options):
    """A verb that measures on a device (bench, run, sweep, fleet, load, deploy's canaries):
    how it connects, what it measures, where results go, and whether device health counts.
    ``BenchOptions.of(runs=5, retries=0)`` routes each name to its part."""

    connection: ConnectionOptions = ConnectionOptions()
    measure: MeasureOptions = MeasureOptions()
    results_dir: Optional[PathLike] = None
    health: bool = True                 # refuse unhealthy devices, count this bench


def parse_warmups(value) -> str | int:
    """'auto' or a count >= 0 (also given as text); None means 'auto'."""
    if value is None or value == "auto":
        return "auto"
    if isinstance(value, bool):
        raise ConfigError(f"--warmups must be 'auto' or a count, not {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"--warmups must be 'auto' or a count, not {value!r}") from None
    if not 0 <= n <= MAX_COUNT:
        raise ConfigError(f"--warmups must be 'auto' or a count from 0 to {MAX_COUNT}, not {value!r}")
    return n

