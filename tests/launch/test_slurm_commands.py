"""tuner.launch._slurm_commands: Slurm's commands and outputs read without a cluster (durations, failures, environment)."""

from tuner.launch import client_env, diagnose_slurm_failure, parse_slurm_duration_s


def test_diagnose_slurm_failure_names_slurms_reason():
    assert diagnose_slurm_failure("7", "NODE_FAIL", "NodeDown", "") == "slurm: NODE_FAIL (job 7, Reason=NodeDown)"
    assert diagnose_slurm_failure("7", "PREEMPTED", "None", "") == "slurm: PREEMPTED (job 7)"
    log = "x\nslurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO PREEMPTION ***\n"
    assert diagnose_slurm_failure("7", "RUNNING", "None", log).startswith("slurm: PREEMPTED")
    assert diagnose_slurm_failure("7", "", "", "srun: error: Node failure on n3\n").startswith("slurm: NODE_FAIL")
    node_down = "*** STEP 7.0 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG ***"
    assert diagnose_slurm_failure("7", "COMPLETING", "", node_down).startswith("slurm: NODE_FAIL")
    assert diagnose_slurm_failure("7", "CANCELLED", "", "") == "slurm: CANCELLED (job 7)"
    refused = "srun: error: Unable to create step for job 7: Requested node configuration is not available"
    assert "Requested node configuration" in diagnose_slurm_failure("7", "RUNNING", "None", refused)
    # the workload's own failure is not Slurm's
    assert diagnose_slurm_failure("7", "RUNNING", "None", "Traceback ...\nValueError: x") is None


def test_parse_slurm_duration_s():
    assert parse_slurm_duration_s("02:00:00") == 7200
    assert parse_slurm_duration_s("1-00:00:10") == 86410
    assert parse_slurm_duration_s("30") == 1800 and parse_slurm_duration_s("05:30") == 330
    assert parse_slurm_duration_s("UNLIMITED") is None


def test_an_enclosing_jobs_variables_do_not_leak_into_srun():
    env = client_env({"SLURM_NTASKS": "8", "SLURM_JOB_ID": "1", "SLURM_CONF": "/c", "PATH": "/bin"})
    assert env == {"SLURM_CONF": "/c", "PATH": "/bin"}


def test_an_option_counts_as_given_in_either_spelling():
    from tuner.launch._slurm_commands import mentions_option

    assert mentions_option(("--gres", "gpu:8"), "--gres") and mentions_option(("--gres=gpu:8",), "--gres", "-G")
    assert not mentions_option(("--gres-flags=enforce-binding",), "--gres")


def test_the_rendezvous_port_is_the_same_for_every_rank_and_differs_between_trials():
    from tuner.launch._slurm_commands import _RDZV_PORT_BASE, _RDZV_PORT_SPAN, rdzv_port

    assert rdzv_port("1234", 5) == rdzv_port("1234", 5)
    assert rdzv_port("1234", 5) != rdzv_port("1234", 6) and rdzv_port("1234", 5) != rdzv_port("1235", 5)
    assert rdzv_port("1234_7", 0) == rdzv_port("12347", 0)  # digits only: array jobs
    assert all(_RDZV_PORT_BASE <= rdzv_port(str(j), t) < _RDZV_PORT_BASE + _RDZV_PORT_SPAN
               for j in range(0, 5000, 97) for t in range(5))


def test_the_time_left_is_the_limit_less_the_run_time_and_unknown_when_unlimited():
    from tuner.launch._slurm_commands import time_left_s

    assert time_left_s({"TimeLimit": "01:00:00", "RunTime": "00:10:30"}) == 2970
    assert time_left_s({"TimeLimit": "UNLIMITED", "RunTime": "00:10:30"}) is None
    assert time_left_s({}) is None
