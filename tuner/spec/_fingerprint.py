"""A study spec's fingerprint: what coordinators joining one study must share.

Node-local settings are left out, and so are fields added after the first release while they
hold their default, so a study created by an older release can still be joined.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from tuner.spec._sections import SECTIONS

__all__ = ["FINGERPRINT_WHEN_SET", "spec_fingerprint"]

FINGERPRINT_WHEN_SET: tuple[tuple[str, str], ...] = (
    # Spec fields added after the first release, as (section, field): the fingerprint leaves one
    # out while it holds its dataclass default, so a study created by an older release (which
    # never had the field) can still be joined, and a study that sets it still fingerprints it.
    # One line per field; add yours here.
    ("trial", "checkpoint_every"),
    ("trial", "checkpoint_mode"),
    ("trial", "warm_warmup_steps"),
    ("cluster", "sim_physics"),
    ("model", "stack"),
)


def _field_default(section: str, name: str) -> Any:
    f = next(f for f in dataclasses.fields(SECTIONS[section]) if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def spec_fingerprint(spec_dict: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a spec dict (what joining coordinators must share).

    The launcher is part of it: mixing simulated and measured trials in one study would
    corrupt its record. Node-local folders (cache, shared dir, checkpoint dir) are not:
    coordinators on other nodes may keep them elsewhere; nor is ``trial.resident``. Fields in FINGERPRINT_WHEN_SET are
    left out while they hold their default (older releases did not have them).
    """
    spec_dict = json.loads(json.dumps(spec_dict))
    spec_dict.get("data", {}).pop("cache_dir", None)
    spec_dict.get("cluster", {}).pop("shared_dir", None)
    spec_dict.get("trial", {}).pop("checkpoint_dir", None)
    # warm or cold trials measure the same (only cost differs): coordinators may differ there
    spec_dict.get("trial", {}).pop("resident", None)
    for section, name in FINGERPRINT_WHEN_SET:
        values = spec_dict.get(section, {})
        if name in values and values[name] == json.loads(json.dumps(_field_default(section, name))):
            del values[name]
    canonical = json.dumps(spec_dict, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
