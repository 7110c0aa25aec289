"""Distil finished studies into a calibration of the helper's performance model.

Every trial with user attr ``status == "ok"`` becomes one measurement: the study's spec
(``spec.model.preset``, ``spec.model.seq_len``, ``spec.cluster.gpu`` / ``nodes`` /
``gpus_per_node``) plus the trial's knob values (params, falling back to the spec's
``baseline`` and the model section) and its value, tokens/s/GPU. ``helper.fit_calibration``
fits them on top of the shipped default calibration (with leave-one-out error next to the
in-sample error, and the noise estimated from repeated configurations); trials' recorded
``peak_mem_gib`` set ``memory_scale``, the memory model's correction. The result is written
as JSON for ``helper.load_calibration`` and ``tuner suggest --calibration``.

Example:
    >>> cal = distill("sqlite:///tuner.db", ["quickstart"], "out/calibration.json")  # doctest: +SKIP
    >>> cal["quality"]["median_abs_pct_error"]                                     # doctest: +SKIP
    4.2
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner import knobs
from tuner import model as tuner_model
from tuner.errors import StudyConflictError
from tuner.storage import redact_url
from tuner.study import load_existing_study

__all__ = ["distill", "study_measurements"]

def study_measurements(study: optuna.Study) -> list[dict[str, Any]]:
    """The ok trials of one tuner study as ``fit_calibration`` measurement dicts.

    Raises:
        StudyConflictError: the study has no ``spec`` user attr or its spec has no preset.
    """
    spec = study.user_attrs.get("spec")
    if not isinstance(spec, dict):
        raise StudyConflictError(f"study {study.study_name!r} has no `spec` user attr: not a tuner study")
    model, cluster = spec.get("model", {}), spec.get("cluster", {})
    preset = model.get("preset")
    if not preset:
        raise StudyConflictError(f"study {study.study_name!r}: spec.model.preset is not set "
                                 "(a `path` model has no size the helper knows); cannot distil it")
    baseline = spec.get("baseline") or {}
    nodes, gpn = int(cluster.get("nodes", 1)), int(cluster.get("gpus_per_node", 1))
    seq_len = int(model.get("seq_len", 2048))
    simulated = bool(study.user_attrs.get("simulated", False))
    # params, then the baseline and the [model] section, then the catalogue's defaults
    fallback = {"activation_checkpointing": bool(model.get("activation_checkpointing", False)), **baseline}
    ok = [(t, knobs.resolve(t.params, fallback)) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
          if t.user_attrs.get("status") == "ok" and t.value is not None and t.value > 0]
    mean = tuner_model.measured_mean_tokens(seq_len, [(v.get("padding"), t.user_attrs.get("padding_efficiency"))
                                                      for t, v in ok])
    out = []
    for t, values in ok:
        measured = t.user_attrs.get("padding_efficiency")
        measured = float(measured) if isinstance(measured, (int, float)) else None
        inputs = tuner_model.model_inputs(values, model=preset, gpu=cluster.get("gpu", "H100-80GB"),
                                          world_size=int(t.user_attrs.get("world_size") or nodes * gpn),
                                          gpus_per_node=gpn, seq_len=seq_len, mean_tokens=mean,
                                          padding_efficiency=measured)
        m = {"study": study.study_name, "trial": t.number, "simulated": simulated,
             **inputs.measurement(t.value, padding_known=measured is not None)}
        for attr in ("startup_seconds", "peak_mem_gib"):
            if isinstance(t.user_attrs.get(attr), (int, float)):
                m[attr] = float(t.user_attrs[attr])
        out.append(m)
    return out


def distill(storage: str | optuna.storages.BaseStorage, study_names: str | Sequence[str],
            out_path: str | Path, *, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit the helper's calibration to finished studies and write it to ``out_path``.

    Args:
        storage: an Optuna storage URL (``sqlite:///tuner.db``, PostgreSQL) or storage object.
        study_names: one or more study names in that storage.
        out_path: the calibration JSON to write (folders are created).
        base: the calibration to start from (default: the helper's shipped default); its
            other GPUs' constants are kept.

    Returns:
        The calibration dict written (``constants``, ``informed``, ``quality`` with the
        median absolute % error and per-knob residuals, ``provenance``, ``source``).

    Raises:
        StudyConflictError: a study is missing, is not a tuner study, or has no ok trial.
    """
    names = [study_names] if isinstance(study_names, str) else list(study_names)
    where = redact_url(storage) if isinstance(storage, str) else type(storage).__name__
    measurements: list[dict[str, Any]] = []
    for name in names:
        measurements.extend(study_measurements(load_existing_study(storage, name)))
    if not measurements:
        raise StudyConflictError(f"no finished trial with status ok in {', '.join(map(repr, names))} ({where})")
    simulated = sorted({m["study"] for m in measurements if m["simulated"]})
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
    source = (f"distilled from {len(measurements)} ok trials of {', '.join(names)} ({where}) at {now}"
              + (f"; simulated studies: {', '.join(simulated)}" if simulated else ""))
    base = base if base is not None else tuner_model.load_calibration()
    cal = tuner_model.fit_calibration(measurements, base=base, source=source, cross_validate=True)
    memory = tuner_model.fit_memory_scale(measurements)
    for gpu, fit in memory.items():  # trials' peak_mem_gib -> estimate_memory's correction
        cal["constants"].setdefault(gpu, {})["memory_scale"] = fit["memory_scale"]
        cal["informed"][gpu] = sorted(set(cal["informed"].get(gpu, [])) | {"memory_scale"})
    cal["quality"]["memory"] = memory
    cal["provenance"]["storage"] = where
    cal["provenance"]["simulated_studies"] = simulated
    if simulated:
        cal["provenance"]["warning"] = ("some trials came from the sim launcher, whose numbers come "
                                        "from this same model: fitting them is circular")
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cal, indent=2) + "\n")
    return cal
