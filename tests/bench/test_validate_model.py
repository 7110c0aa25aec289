"""bench/validate_model.py: the model scored on sources it was not fitted to, and memory per stack."""

import math

from bench import validate_model as vm


def test_no_published_configuration_that_ran_is_predicted_out_of_memory_under_its_stack():
    lines, bad, total = vm.oom_table()
    assert bad == 0 and total >= 2 * len(vm.scored_rows()) - 10, "\n".join(lines)


def test_a_held_out_source_is_never_in_its_own_fit(monkeypatch):
    seen = []
    real = vm.fit_fold

    def spy(rows, **kw):
        seen.append({r["source"] for r in rows})
        return real(rows, **kw)

    monkeypatch.setattr(vm, "fit_fold", spy)
    results = vm.leave_one_source_out(only=("fms-fsdp README",), n_starts=1)
    assert seen == [{r["source"] for r in vm.scored_rows()} - {"fms-fsdp README"}]
    assert len(results) == 2 and all(math.isfinite(x["error_pct"]) for x in results)
    assert all(x["row"]["stack"] == "fms-fsdp" for x in results)


def test_every_scored_row_names_its_source_and_stack():
    rows = vm.scored_rows()
    assert all(r["source"] and r["stack"] for r in rows)
    assert len({r["source"] for r in rows}) >= 7


def test_the_tie_sensitivity_unties_then_varies_the_spread_and_restores_the_shipped_one(monkeypatch):
    import helper.ties as ties

    shipped = ties.SHARED_ACROSS_GPUS, ties.SHARED_TIE_SD
    seen = []

    def fake_loso():
        seen.append((ties.SHARED_ACROSS_GPUS, ties.SHARED_TIE_SD))
        return [{"error_pct": 2.0 * len(seen)}]

    monkeypatch.setattr(vm, "leave_one_source_out", fake_loso)
    lines = vm.tie_sensitivity((0.3, shipped[1]))
    assert seen == [((), shipped[1]), (shipped[0], 0.3), shipped]
    assert (ties.SHARED_ACROSS_GPUS, ties.SHARED_TIE_SD) == shipped
    assert len(lines) == 4 + 3 and "none (attention only)" in lines[4] and "(shipped)" in lines[6]
