"""The progress display: live, monotone, with reasons, and readable on a real terminal."""

import os
import re
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from tuner.launch import TrialResult
from tuner.report import Progress, ProgressState, format_duration

ROOT = Path(__file__).resolve().parents[2]


def event(kind, **kw):
    base = dict(kind=kind, number=None, params=None, result=None, used_gpu_seconds=0.0, limit_gpu_seconds=0.0,
                best_value=None, best_ci=None, reserved_gpu_seconds=None, gpus=0, result_path=None,
                planned_steps=0, message="")
    return SimpleNamespace(**{**base, **kw})


def test_gpu_hours_never_go_backwards_and_a_stop_resets_nothing():
    """Before: 67% -> 36% (the reservation shown, then the cost); 0.000 GPU-h after Ctrl-C."""
    s = ProgressState()
    s.apply(event("start", number=0, used_gpu_seconds=300.0, limit_gpu_seconds=1000.0, reserved_gpu_seconds=300.0,
                  gpus=2), now=0.0)
    assert s.used_gpu_seconds(now=0.0) == 0.0                 # the reservation is not spend
    assert s.used_gpu_seconds(now=10.0) == pytest.approx(20.0)   # 2 GPUs x 10 s, live
    s.apply(event("end", number=0, used_gpu_seconds=18.0, limit_gpu_seconds=1000.0,
                  result=TrialResult(status="ok", launcher="x", world_size=2, gpu_seconds=18.0, wall_seconds=9.0,
                                     step_values=((0, 5.0),))), now=10.0)
    assert s.used_gpu_seconds(now=10.0) == pytest.approx(20.0)   # measured 18 < shown 20: it stays
    s.apply(event("stop", message="interrupted"), now=11.0)
    s.apply(event("note", message="storage unreachable"), now=11.0)
    assert s.used_gpu_seconds(now=11.0) == pytest.approx(20.0) and s.done == 1


def test_the_status_line_has_the_running_trial_its_steps_best_with_ci_and_an_eta(tmp_path):
    result = tmp_path / "result.jsonl"
    s = ProgressState(started_at=0.0)
    s.apply(event("start", number=7, used_gpu_seconds=600.0, limit_gpu_seconds=3600.0, reserved_gpu_seconds=600.0,
                  gpus=2, result_path=str(result), planned_steps=8, best_value=1628.4, best_ci=(1601.0, 1655.0)),
            now=0.0)
    result.write_text('{"event": "step", "step": 0, "tokens": 4000, "seconds": 1.0}\n'
                      '{"event": "step", "step": 1, "tokens": 4000, "seconds": 1.0}\n{"event": "st')  # one being written
    s.poll_steps()
    line = s.status_line(now=43.0)
    assert "trial 7 running 00:43, step 2/8 (2,000 tok/s/GPU)" in line
    assert "best 1,628 tok/s/GPU (95% CI 1,601-1,655)" in line
    eta = s.eta_seconds(now=43.0)                            # 86 of 3600 GPU-s in 43 s: 2 GPU-s/s
    assert eta == pytest.approx((3600 - 86) / 2.0)
    assert format_duration(eta) == "29:17"


def test_each_failure_prints_its_reason_on_one_line(tmp_path):
    out = tmp_path / "log.txt"
    with open(out, "w") as fh:
        p = Progress(file=fh)
        p(event("end", number=3, params={"micro_batch": 8}, used_gpu_seconds=5.0, limit_gpu_seconds=100.0,
                result=TrialResult(status="error", launcher="x", world_size=2, gpu_seconds=5.0, wall_seconds=2.5,
                                   message="exit 1: StopIteration\n  in objectives/data.py")))
        p.close()
    lines = out.read_text().splitlines()
    assert lines[0] == 'trial 3: error: exit 1: StopIteration in objectives/data.py  {"micro_batch": 8}'


CHILD = textwrap.dedent("""
    import json, os, signal, sys, time
    # Ctrl-C raises, as in a terminal, even where the suite itself was started with SIGINT
    # ignored (in the background of a script: nohup, `&`), which this child would inherit
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from tests.spine_helpers import fast_spec
    from pathlib import Path
    from tuner.study import RunOptions, run_study
    from tuner.launch import Launcher, TrialResult
    from tuner.report import Progress

    class Stepping(Launcher):
        name = "stepping"
        def launch(self, request):
            request.run_dir.mkdir(parents=True, exist_ok=True)
            with open(request.run_dir / "result.jsonl", "w") as fh:
                for step in range(4):
                    time.sleep(0.8)
                    fh.write(json.dumps({{"event": "step", "step": step, "tokens": 2000, "seconds": 1.0}}) + "\\n")
                    fh.flush()
            if request.number == 1:
                return TrialResult(status="error", launcher="x", world_size=2, gpu_seconds=7.0, wall_seconds=3.5,
                                   message="exit 1: ValueError: bad data row 17")
            return TrialResult(status="ok", launcher="x", world_size=2, gpu_seconds=7.0, wall_seconds=3.5,
                               step_values=tuple((s, 1000.0 + s) for s in range(4)))

    tmp = Path({tmp!r})
    spec = fast_spec(tmp)
    progress = Progress(tick_s=0.2)
    try:
        run_study(spec, RunOptions(storage_url=f"sqlite:///{{tmp}}/t.db", runs_dir=tmp / "runs",
                                   budget_gpu_seconds=200.0, max_trials={max_trials}),
                  on_event=progress, launcher=Stepping(spec))
    finally:
        progress.close()
""")


def run_in_pty(tmp_path, max_trials, interrupt_when=None):
    """Run the child on a pseudo-terminal (its stderr is a tty) and return the screen bytes."""
    master, slave = os.openpty()
    code = CHILD.format(tests=str(ROOT / "tests"), tmp=str(tmp_path), max_trials=max_trials)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave, stderr=slave,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(slave)
    screen, sent = b"", False
    while True:
        if interrupt_when is not None and not sent and re.search(interrupt_when, screen.decode(errors="replace")):
            proc.send_signal(signal.SIGINT)
            sent = True
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(master)
    return screen.decode(errors="replace")


def frames(screen):
    """What the terminal showed, redraw by redraw (\\r and clear-line split the frames)."""
    return [f.strip() for f in re.split(r"\r|\x1b\[K|\n", screen) if f.strip()]


@pytest.mark.slow
def test_on_a_terminal_the_running_trial_ticks_and_steps_arrive(tmp_path):
    # four trials: warm ones take ~3 s each here, and the ETA needs 10 s of the run's own pace
    screen = run_in_pty(tmp_path, max_trials=4)
    shown = frames(screen)
    running = [f for f in shown if "running" in f]
    assert any(re.search(r"trial 0 running 00:0[1-9]", f) for f in running)            # elapsed moves
    assert any("step 1/4" in f for f in running) and any("step 3/4" in f for f in running)
    used = [float(m.group(1)) for f in shown for m in [re.search(r"\] (\d+\.\d+)/", f)] if m]
    assert used == sorted(used) and used[-1] > 0                                       # never backwards
    assert any("trial 1: error: exit 1: ValueError: bad data row 17" in f for f in shown)
    assert any(re.search(r"best 1,00\d tok/s/GPU \(95% CI", f) for f in shown)
    assert any(re.search(r"ETA \d\d:\d\d", f) for f in shown)


@pytest.mark.slow
def test_after_ctrl_c_the_display_keeps_its_numbers(tmp_path):
    run_in_pty(tmp_path, max_trials=1)                      # one trial done, then a second run is interrupted
    # any elapsed time: on a loaded machine step 2 may come after 10 s
    screen = run_in_pty(tmp_path, max_trials=3, interrupt_when=r"trial [1-9] running \d\d:\d\d, step 2/4")
    shown = frames(screen)
    assert any("interrupted" in f for f in shown)
    last_status = [f for f in shown if "GPU-h" in f][-1]
    assert not re.search(r"\] 0\.000/", last_status) and "best 1,00" in last_status
