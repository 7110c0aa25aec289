"""tuner.launch._env: the environment a trial's processes get (NCCL knobs, the protocol's files)."""

from tuner.launch import trial_environment


def test_default_means_unset_even_if_the_shell_set_it():
    env = trial_environment({"nccl_algo": "default", "nccl_proto": "LL128"},
                            {"NCCL_ALGO": "Tree", "PATH": "/bin"}, config_path="c", result_path="r")
    assert "NCCL_ALGO" not in env and env["NCCL_PROTO"] == "LL128"
    per_collective = trial_environment({"nccl_algo": "allgather:ring;reducescatter:ring"}, {},
                                       config_path="c", result_path="r")
    assert per_collective["NCCL_ALGO"] == "allgather:ring;reducescatter:ring"
    assert per_collective["TUNER_TRIAL_CONFIG"] == "c" and per_collective["TUNER_RESULT_FILE"] == "r"


def test_the_protocols_paths_are_set_and_output_is_unbuffered_unless_the_shell_says_otherwise():
    from tuner.protocol import CONFIG_ENV, RESULT_ENV

    env = trial_environment({}, {"PATH": "/bin", "TUNER_RESULT_FILE": "stale"}, config_path="/c.json",
                            result_path="/r.jsonl")
    assert env[CONFIG_ENV] == "/c.json" and env[RESULT_ENV] == "/r.jsonl" and env["PATH"] == "/bin"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert trial_environment({}, {"PYTHONUNBUFFERED": "0"}, config_path="c", result_path="r")["PYTHONUNBUFFERED"] == "0"
