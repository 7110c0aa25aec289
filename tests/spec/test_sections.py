"""tuner.spec._sections: a spec's tables as dataclasses, their defaults, and a knob's space."""

import dataclasses

import pytest

from tuner.knobs import KNOBS
from tuner.spec import KnobSpace
from tuner.spec._sections import KNOWN_KNOBS, SECTIONS, ClusterSection, TrialSection


def test_every_section_is_a_frozen_keyword_only_table():
    assert set(SECTIONS) == {"study", "model", "data", "cluster", "trial"}
    for cls in SECTIONS.values():
        params = cls.__dataclass_params__
        assert params.frozen and dataclasses.fields(cls)[0].kw_only, cls.__name__
    assert KNOWN_KNOBS == tuple(KNOBS)


def test_the_world_size_is_nodes_times_gpus_per_node():
    assert ClusterSection().world_size == 1
    assert ClusterSection(nodes=4, gpus_per_node=8).world_size == 32


def test_trials_are_adaptive_warm_and_run_the_fsdp_workload_by_default():
    t = TrialSection()
    assert (t.warmup_steps, t.measure_steps, t.timeout_s) == (2, 8, 600.0)
    assert t.adaptive and t.resident and t.warm_warmup_steps == 1 and t.min_steps == 4
    assert t.command == ("-m", "objectives.fsdp_finetune") and t.checkpoint_every == 0


def test_a_choice_knob_holds_its_choices_and_a_range_its_interval():
    padding = KnobSpace(name="padding", choices=("packed", "longest"))
    assert padding.contains("packed") and not padding.contains("max_length")
    assert padding.values_for_grid() == ("packed", "longest") and not padding.is_int
    share = KnobSpace(name="x", low=0.5, high=1.0)
    assert share.contains(0.75) and not share.contains(1.5) and not share.is_int


def test_an_integer_range_is_a_grid_by_its_step_or_by_doubling_when_log():
    assert KnobSpace(name="grad_accum", low=1, high=8, log=True).values_for_grid() == (1, 2, 4, 8)
    assert KnobSpace(name="grad_accum", low=1, high=9, log=True).values_for_grid() == (1, 2, 4, 8)
    assert KnobSpace(name="num_workers", low=0, high=8, step=4).values_for_grid() == (0, 4, 8)
    assert KnobSpace(name="micro_batch", low=1, high=3).values_for_grid() == (1, 2, 3)
    with pytest.raises(ValueError, match="knob x: a float range has no grid"):
        KnobSpace(name="x", low=0.5, high=1.0).values_for_grid()
