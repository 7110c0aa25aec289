"""Trial workloads run under torchrun; they speak the trial protocol and never touch the study.

    torchrun --standalone --nproc_per_node N -m objectives.fsdp_finetune

- :mod:`objectives.fsdp_finetune`: the FSDP2 fine-tuning trial (``main``, ``load_config``,
  ``run_trial``, ``build_data``, ``build_sharded_model``, ``train_step``, ``classify_error``);
- :mod:`objectives.trial_config`: the trial config file parsed and checked against tuner's knob catalogue;
- :mod:`objectives.models`: presets -> random-weight Llama on the meta device, local HF paths;
- :mod:`objectives.data`: Alpaca-style data, tokenizers, padding/packing, DataLoaders.

Nothing is imported here, so ``python -m objectives.fsdp_finetune`` runs the module once
and ``import objectives`` stays free of torch.
"""
