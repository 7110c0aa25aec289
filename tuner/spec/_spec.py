"""Study specs: TOML in, frozen validated dataclasses out.

A spec is parsed once, at the edge. Every problem raises :class:`SpecError` whose message
names the file, the key and the problem on one line, before anything starts.

Example:
    >>> spec = load_spec("studies/quickstart.toml")   # doctest: +SKIP
    >>> spec.study.name, spec.cluster.world_size       # doctest: +SKIP
    ('quickstart', 2)
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.budget import parse_budget
from tuner.errors import BudgetError, SpecError
from tuner.knobs import KNOBS, LAUNCH_KNOBS, activity_rule, is_active, value_problem
from tuner.spec._cluster import (
    check_spec,
    preset_problem,
    sim_gpu_problem,
    sim_physics_problem,
    slurm_time_problem,
    stack_problem,
)
from tuner.spec._fingerprint import FINGERPRINT_WHEN_SET, spec_fingerprint
from tuner.spec._sections import (
    BACKENDS,
    DTYPES,
    KNOWN_KNOBS,
    LAUNCHERS,
    SAMPLERS,
    SECTIONS,
    ClusterSection,
    DataSection,
    KnobSpace,
    ModelSection,
    StudySection,
    TrialSection,
)

__all__ = [
    "SpecError", "StudySpec", "StudySection", "ModelSection", "DataSection", "ClusterSection",
    "TrialSection", "KnobSpace", "load_spec", "parse_spec", "spec_fingerprint", "FINGERPRINT_WHEN_SET", "study_name_problem",
    "KNOWN_KNOBS", "LAUNCH_KNOBS", "SAMPLERS",
]

@dataclass(frozen=True, kw_only=True)
class StudySpec:
    study: StudySection
    model: ModelSection
    data: DataSection
    cluster: ClusterSection
    trial: TrialSection
    space: tuple[KnobSpace, ...]
    baseline: dict[str, Any] = field(default_factory=dict)
    budget_gpu_seconds: float | None = None
    """Default budget from `[budget] limit`; `tuner run --budget` overrides it."""
    source_path: str | None = None
    """The spec file it was read from (for messages; not part of the fingerprint)."""

    def knob(self, name: str) -> KnobSpace | None:
        return next((k for k in self.space if k.name == name), None)

    @property
    def knob_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.space)

    @property
    def first_estimate_gpu_seconds(self) -> float:
        """GPU-seconds of a trial before any has finished: [trial] estimate_gpu_seconds, else its
        timeout x world size (the most a trial may cost)."""
        if self.trial.estimate_gpu_seconds is not None:
            return self.trial.estimate_gpu_seconds
        return self.trial.timeout_s * self.cluster.world_size

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, stored as the study's `spec` user attr."""
        d = dataclasses.asdict(self)
        d.pop("source_path")
        d["budget"] = {"limit_gpu_seconds": d.pop("budget_gpu_seconds")}
        d["space"] = {k["name"]: {kk: vv for kk, vv in k.items() if kk != "name" and vv not in (None, False)}
                      for k in d["space"]}
        return json.loads(json.dumps(d))

    def with_launcher(self, launcher: str) -> StudySpec:
        if launcher not in LAUNCHERS:
            raise SpecError(f"--launcher: unknown launcher {launcher!r}; one of {', '.join(LAUNCHERS)}")
        problem = sim_gpu_problem(self.cluster.gpu) if launcher == "sim" else None
        if problem:
            raise SpecError(f"{self.source_path}: cluster.gpu: {problem} (--launcher sim)")
        cluster = dataclasses.replace(self.cluster, launcher=launcher)
        check_spec(self.space, self.baseline, cluster, self.model.preset, self.trial,
                                lambda key, problem: SpecError(f"{self.source_path}: {key}: {problem} (--launcher {launcher})"))
        return dataclasses.replace(self, cluster=cluster)


# ----------------------------------------------------------------------------- parsing



def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a TOML study spec. Relative paths resolve against the spec's folder."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec: {exc.strerror}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    return parse_spec(raw, base_dir=path.resolve().parent, origin=str(path))


def parse_spec(raw: dict[str, Any], *, base_dir: Path | None = None, origin: str = "<spec>") -> StudySpec:
    """Validate a spec already parsed from TOML (or rebuilt from a study's `spec` attr)."""
    base_dir = base_dir or Path.cwd()

    def fail(key: str, problem: str) -> SpecError:
        return SpecError(f"{origin}: {key}: {problem}")

    unknown = set(raw) - set(SECTIONS) - {"space", "baseline", "budget"}
    if unknown:
        raise fail(sorted(unknown)[0], f"unknown section; known: {', '.join([*SECTIONS, 'budget', 'space', 'baseline'])}")
    if "study" not in raw or "name" not in raw.get("study", {}):
        raise fail("study.name", "missing (every study needs a name)")

    sections = {}
    for name, cls in SECTIONS.items():
        sections[name] = _build_section(cls, raw.get(name, {}), name, fail)

    study, model, data, cluster, trial = (sections[n] for n in SECTIONS)
    _check_study(study, fail)
    model = _check_model(model, base_dir, fail)
    data = _check_data(data, base_dir, fail)
    cluster = _check_cluster(cluster, base_dir, fail)
    _check_trial(trial, fail)

    budget = raw.get("budget", {})
    if not isinstance(budget, dict) or set(budget) - {"limit"}:
        raise fail("budget", "only `limit` is allowed, e.g. limit = \"40gpuh\"")
    budget_s = None
    if "limit" in budget:
        try:
            budget_s = parse_budget(str(budget["limit"]))
        except BudgetError as exc:
            raise fail("budget.limit", str(exc)) from None

    space = _parse_space(raw.get("space", {}), fail)
    baseline = _check_baseline(raw.get("baseline", {}), space, fail)
    if trial.checkpoint_dir:
        trial = dataclasses.replace(trial, checkpoint_dir=str((base_dir / trial.checkpoint_dir).resolve()))
    check_spec(space, baseline, cluster, model.preset, trial, fail)  # layouts x cluster, sim

    return StudySpec(study=study, model=model, data=data, cluster=cluster, trial=trial,
                     space=space, baseline=baseline, budget_gpu_seconds=budget_s,
                     source_path=origin)


def _build_section(cls, table: Any, section: str, fail):
    if not isinstance(table, dict):
        raise fail(section, "must be a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in table.items():
        if key not in fields:
            raise fail(f"{section}.{key}", f"unknown key; known: {', '.join(fields)}")
        expected = fields[key].type
        if not _type_ok(value, expected):
            raise fail(f"{section}.{key}", f"expected {expected}, got {type(value).__name__} {value!r}")
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items()}
    return cls(**kwargs)


def _type_ok(value: Any, annotation: str) -> bool:
    ann = str(annotation)
    if value is None:
        return "None" in ann
    if "tuple" in ann:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if ann.startswith("bool"):
        return isinstance(value, bool)
    if ann.startswith("int"):
        return isinstance(value, int) and not isinstance(value, bool)
    if ann.startswith("float"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if ann.startswith("str"):
        return isinstance(value, str)
    return True


def study_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a study, or None. Trial folders are ``runs/<name>/...``, so a
    name is one folder name: no path separator, not `.` or `..`.

    Example:
        >>> study_name_problem("../../x")
        "'../../x' would put trial folders outside the runs folder: use letters, digits, '-', '_' and '.'"
    """
    if not name.strip():
        return "must not be empty"
    if "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        return (f"{name!r} would put trial folders outside the runs folder: "
                "use letters, digits, '-', '_' and '.'")
    return None


def _check_study(s: StudySection, fail) -> None:
    problem = study_name_problem(s.name)
    if problem:
        raise fail("study.name", problem)
    if not 0 <= s.seed < 2**32:  # numpy's and Optuna's seeds are unsigned 32-bit
        raise fail("study.seed", f"must be an integer in [0, 2^32), got {s.seed}")
    if s.sampler not in SAMPLERS:
        raise fail("study.sampler", f"unknown sampler {s.sampler!r}; one of {', '.join(SAMPLERS)}")
    if not 0.0 <= s.ablation_share < 1.0:
        raise fail("study.ablation_share", f"must be in [0, 1), got {s.ablation_share}")


def _check_model(m: ModelSection, base_dir: Path, fail) -> ModelSection:
    if (m.preset is None) == (m.path is None):
        raise fail("model", "set exactly one of `preset` (random weights) or `path` (from_pretrained)")
    if m.preset is not None and (problem := preset_problem(m.preset)):
        raise fail("model.preset", problem)
    if m.seq_len < 8:
        raise fail("model.seq_len", f"must be >= 8, got {m.seq_len}")
    if m.dtype not in DTYPES:
        raise fail("model.dtype", f"unknown dtype {m.dtype!r}; one of {', '.join(DTYPES)}")
    if (problem := stack_problem(m.stack)):
        raise fail("model.stack", problem)
    if m.path is not None and _looks_local(m.path):
        resolved = (base_dir / m.path).resolve()
        if not resolved.exists():
            raise fail("model.path", f"{resolved} does not exist")
        m = dataclasses.replace(m, path=str(resolved))
    return m


def _looks_local(value: str) -> bool:
    return value.startswith((".", "/", "~")) or value.endswith((".json", ".jsonl", ".parquet"))


def _check_data(d: DataSection, base_dir: Path, fail) -> DataSection:
    if d.template != "alpaca":
        raise fail("data.template", f"unknown template {d.template!r}; known: alpaca")
    if d.vocab_size < 256:
        raise fail("data.vocab_size", f"must be >= 256, got {d.vocab_size}")
    if d.num_examples < 0:
        raise fail("data.num_examples", "must be >= 0")
    if d.source != "synthetic" and _looks_local(d.source):
        resolved = (base_dir / Path(d.source).expanduser()).resolve()
        if not resolved.exists():
            raise fail("data.source", f"{resolved} does not exist")
        d = dataclasses.replace(d, source=str(resolved))
    if d.tokenizer != "train" and _looks_local(d.tokenizer):
        resolved = (base_dir / d.tokenizer).resolve()
        if not resolved.exists():
            raise fail("data.tokenizer", f"{resolved} does not exist")
        d = dataclasses.replace(d, tokenizer=str(resolved))
    return dataclasses.replace(d, cache_dir=str((base_dir / d.cache_dir).resolve()))


def _check_cluster(c: ClusterSection, base_dir: Path, fail) -> ClusterSection:
    if c.launcher not in LAUNCHERS:
        raise fail("cluster.launcher", f"unknown launcher {c.launcher!r}; one of {', '.join(LAUNCHERS)}")
    if c.backend not in BACKENDS:
        raise fail("cluster.backend", f"unknown backend {c.backend!r}; one of {', '.join(BACKENDS)}")
    if c.nodes < 1:
        raise fail("cluster.nodes", f"must be >= 1, got {c.nodes}")
    if c.gpus_per_node < 1:
        raise fail("cluster.gpus_per_node", f"must be >= 1, got {c.gpus_per_node}")
    if c.launcher == "sim" and (problem := sim_gpu_problem(c.gpu)):
        raise fail("cluster.gpu", problem)
    if c.time_limit is not None and (problem := slurm_time_problem(c.time_limit)):
        raise fail("cluster.time_limit", problem)
    if problem := sim_physics_problem(c.sim_physics):
        raise fail("cluster.sim_physics", problem)
    if c.shared_dir is not None:
        c = dataclasses.replace(c, shared_dir=str((base_dir / c.shared_dir).resolve()))
    return c


def _check_trial(t: TrialSection, fail) -> None:
    if t.warmup_steps < 0:
        raise fail("trial.warmup_steps", "must be >= 0")
    if t.measure_steps < 2:
        raise fail("trial.measure_steps", f"must be >= 2 (a CI needs steps), got {t.measure_steps}")
    if t.timeout_s <= 0:
        raise fail("trial.timeout_s", "must be > 0")
    if t.estimate_gpu_seconds is not None and t.estimate_gpu_seconds <= 0:
        raise fail("trial.estimate_gpu_seconds", "must be > 0")
    if t.min_steps < 1:
        raise fail("trial.min_steps", f"must be >= 1, got {t.min_steps}")
    if t.warm_warmup_steps < 0:
        raise fail("trial.warm_warmup_steps", f"must be >= 0, got {t.warm_warmup_steps}")
    if not 0 <= t.target_rel_ci < 1:
        raise fail("trial.target_rel_ci", "must be in [0, 1)")
    if not t.command or (t.command[0] == "-m" and len(t.command) < 2):
        raise fail("trial.command", "must name a script or `-m module`")


def _parse_space(table: Any, fail) -> tuple[KnobSpace, ...]:
    if not isinstance(table, dict) or not table:
        raise fail("space", "must list at least one knob, e.g. micro_batch = [1, 2, 4]")
    knobs = []
    for name, value in table.items():
        key = f"space.{name}"
        if name not in KNOBS:
            raise fail(key, f"unknown knob; known: {', '.join(KNOBS)}")
        if isinstance(value, list):
            if not value:
                raise fail(key, "empty list of choices")
            if len(set(map(repr, value))) != len(value):
                raise fail(key, "repeated choices")
            knob = KnobSpace(name=name, choices=tuple(value))
        elif isinstance(value, dict):
            extra = set(value) - {"low", "high", "step", "log"}
            if extra or "low" not in value or "high" not in value:
                raise fail(key, "a range is {low = .., high = .., step = .. (optional), log = true|false (optional)}")
            for bound in ("low", "high", "step"):
                v = value.get(bound)
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise fail(f"{key}.{bound}", f"{v!r} is not a number")
            if not isinstance(value.get("log", False), bool):
                raise fail(f"{key}.log", f"{value['log']!r} is not true/false")
            if value["low"] > value["high"]:
                raise fail(key, f"empty range: low {value['low']} > high {value['high']}")
            knob = KnobSpace(name=name, low=value["low"], high=value["high"],
                             step=value.get("step"), log=bool(value.get("log", False)))
            if knob.log and knob.low <= 0:
                raise fail(key, "a log range needs low > 0")
        else:
            raise fail(key, "must be a list of choices or a {low, high} range")
        for v in (knob.choices or (knob.low, knob.high)):
            problem = value_problem(name, v)
            if problem:
                raise fail(key, problem)
        knobs.append(knob)
    by_name = {k.name: k for k in knobs}
    for knob in knobs:
        rule = KNOBS[knob.name].active_when
        if rule is None:
            continue
        parent = by_name.get(rule[0])
        candidates = (parent.choices or (parent.low, parent.high)) if parent else (KNOBS[rule[0]].default,)
        if not any(is_active(knob.name, {rule[0]: v}) for v in candidates):
            raise fail(f"space.{knob.name}", f"{knob.name} only applies when {activity_rule(knob.name)}, "
                                             f"which the space never chooses")
    return tuple(knobs)


def _check_baseline(table: Any, space: tuple[KnobSpace, ...], fail) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise fail("baseline", "must be a table of knob = value")
    by_name = {k.name: k for k in space}
    for name, value in table.items():
        key = f"baseline.{name}"
        if name not in by_name:
            raise fail(key, f"not a knob of [space] ({', '.join(by_name)})")
        problem = value_problem(name, value)
        if problem:
            raise fail(key, problem)
        if not by_name[name].contains(value):
            raise fail(key, f"{value!r} is outside the space of {name}")
    if not table:
        return {}
    missing = [n for n in by_name if n not in table and is_active(n, table)]
    if missing:
        raise fail("baseline", f"missing knobs: {', '.join(missing)} (the baseline is a full config)")
    for name in table:
        if not is_active(name, table):
            raise fail(f"baseline.{name}", f"{name} only applies when {activity_rule(name)}, "
                                           "which the baseline does not set")
    return dict(table)
