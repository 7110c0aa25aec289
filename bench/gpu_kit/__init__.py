"""The GPU validation kit behind ``bench/gpu_check.py`` (issue 35).

- :mod:`bench.gpu_kit.plan`: what the kit runs, as data: the GPU plan (a ~1B Llama, bf16,
  seq 2048, NCCL) and the dry-run plan (tiny, gloo, seq 64), each check's time box;
- :mod:`bench.gpu_kit.trials`: cold trials under torchrun and a resident worker, through the
  trial protocol (tuner.protocol), each in its own process group with a timeout;
- :mod:`bench.gpu_kit.checks`: the six checks (device, throughput, memory predictions, warm
  switches, checkpoints, NCCL pass-through), each writing its partial result as it goes;
- :mod:`bench.gpu_kit.report`: pure functions: predicted-vs-measured rows, the markdown
  section and the terminal table.

From tuner the kit imports only the trial-rank contract (``tuner.knobs``, ``tuner.protocol``)
and from objectives only ``objectives.metrics.CUDA_NAME_TO_GPU`` (in :mod:`bench.gpu_kit.trials`);
everything else goes through the trial protocol or helper's public API, so it runs where
Optuna, SQLAlchemy and ``datasets`` are not installed.
"""
