"""A model-guided Optuna sampler: helper's performance model, refitted to this study online.

``ModelGuidedSampler`` is an ordinary ``optuna.samplers.BaseSampler``, so studies, storages,
parallel coordinators and optuna-dashboard work as with any other. For every trial it:

1. reads the study (any coordinator's trials): ok measurements, failures, pruned configs,
   RUNNING trials;
2. refits helper's few constants to the ok measurements (``helper.fit_calibration``, the fit
   ``tuner distill`` runs, here online; priors = the shipped calibration) when the trials it
   fits on (the best 16 and the baseline) have changed, else keeps the last fit and its
   predictions;
3. predicts every config of the spec's grid with the refitted model and lets this study's
   measurements overrule it (tuner.search's evidence GP): the model is the prior mean with a
   weight learned from the measurements (``model_weight``: near 1 where its differences
   hold, towards 0 where they do not), each knob level has its own effect learned from every
   config that has it, combinations a GP on top, scales fitted to the measurements; RUNNING
   trials count as measured at their predicted value, so parallel coordinators diverge;
4. proposes, for its first ``n_startup`` picks, the best-predicted config at least two knobs
   away from everything tried (diverse top predictions), then covers the space: each pick measures the
   most knob levels no trial has measured yet (``cover``, not through an unsettled version-
   dependent NCCL setting; no knob's effect is assumed from the model, neutral or not); then, for a memory region
   whose configs beyond the line could beat the best measured, the probe screening would run
   there (``probe``, tuner.search); then the config of highest expected improvement x the
   probability that it fits in memory (peak ratios learned from this study, per memory region
   where measured) x 1/2 for an NCCL setting whose version-dependent rule is still unsettled,
   x 1/2 for each trial this cluster's NCCL refused with that setting, per expected second of
   the trial (cost-aware EI, Snoek et al. 2012, "EI per second"); never a config already
   finished, running, failed or pruned, nor an NCCL setting refused :data:`NCCL_REFUSALS` times
   that never ran (in any config: NCCL's verdict is on the setting, not the batch).

A trial's expected seconds are the set-up its switch needs from this coordinator's resident
worker (nothing, a new data loader, a model rebuild, new communicators, a fresh worker:
tuner.knobs' catalogue, tuner.budget; measured in this study where it has) plus its
warm-up and measured steps at its predicted step time. Cold trials all pay a start-up. A
warm worker also keeps its model while that model's build is more than
:data:`MAX_BUILD_SHARE` of the seconds run on it (rent-or-buy): the configs that need no
rebuild run as a batch, and set-up stays under a quarter of trial time.

Knobs helper's model does not know (or a float range) are left to a TPE sampler. Each trial
it picks carries user attrs ``predicted_tokens_per_sec_per_gpu`` (the belief's mean),
``predicted_rel_sd``, ``model_weight``, ``model_error_sd``, ``model_pick`` (`startup`,
`cover`, `probe`, `ei_per_cost`, `ei_per_cost_same_model`, `enqueued`: why it was picked),
``model_switch`` (what it needs of
the worker) and ``predicted_trial_seconds``, surfaced as "predicted vs measured" by analysis
and the report.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import optuna
import scipy.stats
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from tuner import budget, knobs, model
from tuner.search import _surrogate as surrogate
from tuner.search._grid import MODEL_KNOBS, ModelGrid
from tuner.search._grid_model import GridModel
from tuner.search._screening import MEMORY_KNOBS, NCCL_REFUSALS, PRIOR_MEMORY_MARGIN, PROBES_ATTR, memory_probe, refused_by_nccl
from tuner.search._space import distribution
from tuner.spec import StudySpec, complete_params
from tuner.storage import write_trial

__all__ = ["ModelGuidedSampler", "MODEL_KNOBS"]

PRIOR_RESIDUAL_SD = 0.15
"""Log-residual spread of the model before this study has measured enough to say: helper's
validation against published figures is within ~10-20% (docs/validation.md)."""
MAX_BUILD_SHARE = 0.125
"""A warm worker keeps its model (picks only configs that need no rebuild) until that
model's set-up is at most this share of the seconds run on it: rent-or-buy over rebuilds.
Issue 15's target is set-up at most a quarter of trial GPU time; rebuilds get half of it, the
rest goes to every trial's data-loader set-up, fresh workers and the ablation's reverts
(7B x 32 sim: 0.25 gave 31 %, 0.125 gives 24 %, docs/benchmarks.md)."""
NOISE_SD = 0.02
"""Log sd of one trial's mean: the sim's 1% run-to-run offset plus a 2% CI target."""
MODEL_WEIGHT_SD = 1.0
"""Prior sd of the model's weight around 1 (the evidence GP): 7 configs measured inversely to
helper's predictions bring it to 0.09 (0.66 at a prior sd of 0.5: knob effects absorb it)."""
LEVEL_SDS = (0.02, 0.04, 0.08, 0.16)
INTERACTION_SDS = (0.03, 0.06, 0.12)
"""The evidence GP's scales (type-II ML picks): never below 2% per knob level, 3% per
combination, effects the search must find where the model fits only the large ones."""
MIN_FIT = 6
"""Measured configs before the evidence GP's scales are fitted to them (type-II ML)."""
PICKS = ("startup", "cover", "probe", "ei", "ei_per_cost", "ei_per_cost_same_model")
"""The sampler's own picks (``model_pick``), as opposed to enqueued trials."""


class ModelGuidedSampler(BaseSampler):
    """Expected improvement under helper's model, refitted to the study as its best trials change.

    Args:
        spec: the study spec (its model, cluster and space).
        seed: seed of the TPE fallback (the model's picks are deterministic).
        n_startup: diverse top predictions before the knob levels are covered.
        fallback: sampler for knobs the model does not know (default: TPE, multivariate).

    Example:
        >>> sampler = ModelGuidedSampler(load_spec("studies/sim-llama13b-h100x8.toml"))  # doctest: +SKIP
        >>> study = optuna.create_study(direction="maximize", sampler=sampler)          # doctest: +SKIP
    """

    def __init__(self, spec: StudySpec, *, seed: int = 0, n_startup: int = 3,
                 fallback: BaseSampler | None = None) -> None:
        self._spec, self._n_startup = spec, n_startup
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._fallback = fallback or optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                                                    constant_liar=True)
        self._grid: ModelGrid | None = None
        self._model: GridModel | None = None  # the last refit and its predictions (tuner.search._grid_model)
        self.worker: budget.Worker | None = None
        """This coordinator's resident worker as its last finished trial left it (after_trial:
        Optuna calls it in the process that tells the trial, so parallel coordinators each see
        their own); None: the next trial starts one. A new coordinator starts with none up."""

    @property
    def grid(self) -> ModelGrid:
        if self._grid is None:
            self._grid = ModelGrid(self._spec)
        return self._grid

    def reseed_rng(self) -> None:
        self._fallback.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {n: distribution(self._spec.knob(n)) for n in self.grid.names}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._fallback.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: list[float] | None) -> None:
        self._fallback.after_trial(study, trial, state, values)
        if self._spec.trial.resident:
            self.worker = budget.worker_after(self.worker, trial.params, trial.user_attrs)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        choice = self.propose(study.get_trials(deepcopy=False), exclude_number=trial.number,
                              fixed=trial.system_attrs.get("fixed_params"),
                              probes=study.user_attrs.get(PROBES_ATTR) or [])
        if choice is None:
            return {}
        params, attrs = choice
        write_trial(study, trial, user_attrs=attrs)  # one transaction, not one per attr
        return params

    # ------------------------------------------------------------------ the decision, testable
    def propose(self, trials: list[FrozenTrial], *, exclude_number: int | None = None,
                fixed: dict[str, Any] | None = None,
                probes: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """(params of the known knobs, user attrs to record) for the next trial, or None.
        ``probes``: the study's memory probes so far (tuner.search's ``boundary_probes``)."""
        grid, spec = self.grid, self._spec
        ok = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "ok"
              and t.value is not None and t.value > 0]
        mean_tokens = model.mean_tokens(spec, ok)
        if self._model is None:
            self._model = GridModel(spec, grid)
        self._model.update(ok, mean_tokens)  # a refit only when the trials it reads have changed
        ok_numbers = {t.number for t in ok}
        # a config helper says NCCL cannot run stays in where its twin's prediction can stand in
        # (tuner.search's GridModel): the cluster's preflight or a trial settles it, not the rule
        alive = grid.nccl_may_run.copy()
        obs_idx, obs_y, pending, launched = [], [], [], []
        bad_nccl, good_nccl = set(), set()
        nccl_failures: dict[tuple[str, str], int] = {}  # trials that NCCL refused, per setting
        for t in trials:
            if t.number == exclude_number:
                continue
            i = grid.index.get(grid.key_of_trial(t.params)) if t.params else None
            status = t.user_attrs.get("status")
            preflight_refused = status == "pruned" and "NCCL" in str(t.user_attrs.get("message", ""))
            if status == "error" or preflight_refused:
                full = complete_params(t.params, spec)
                pair = (str(full.get("nccl_algo")), str(full.get("nccl_proto")))
                bad_nccl.add(pair)
                if preflight_refused or refused_by_nccl(t):  # the cluster's verdict, whatever helper's rules say
                    nccl_failures[pair] = nccl_failures.get(pair, 0) + (NCCL_REFUSALS if preflight_refused else 1)
            if i is None:
                continue
            if t.state == TrialState.RUNNING:
                pending.append(i)
            elif t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED):
                alive[i] = False
                if t.state == TrialState.COMPLETE:
                    launched.append(i)
                if t.number in ok_numbers:
                    good_nccl.add(grid.nccl_pairs[i])
                    obs_idx.append(i)
                    obs_y.append(math.log(t.value))
        for i in pending:
            alive[i] = False
        alive &= ~(grid.with_pairs(bad_nccl) & grid.nccl_ruled)
        # refused NCCL_REFUSALS times and never run: written off in every config (one refusal
        # may be a transient NCCL error: it halves the setting's weight below)
        refused = {pair for pair, n in nccl_failures.items() if n >= NCCL_REFUSALS and pair not in good_nccl}
        alive &= ~grid.with_pairs(refused)

        # memory: the measured/predicted peak ratios (per memory region where it has them: the
        # model's structure may be wrong in one region only), and configs dominated by an OOM
        capacity = _capacity(spec)
        regions = grid.regions
        ratio_of: dict[int, list[float]] = {}
        for t in ok:
            i = grid.index.get(grid.key_of_trial(t.params))
            if i is not None and t.user_attrs.get("peak_mem_gib") and grid.mem_gb[i] > 0:
                ratio_of.setdefault(int(regions[i]), []).append(
                    math.log(t.user_attrs["peak_mem_gib"] * 2**30 / 1e9 / grid.mem_gb[i]))
        ratios = [r for rs in ratio_of.values() for r in rs]
        low = 0.95 * math.exp(min(ratios)) if ratios else 1 / PRIOR_MEMORY_MARGIN
        fits_line = grid.mem_gb * low <= capacity
        for t in trials:
            if t.state == TrialState.COMPLETE and t.user_attrs.get("status") == "oom":
                i = grid.index.get(grid.key_of_trial(t.params))
                if i is None:
                    continue
                mb, ckpt, accum, _ = grid.memory_traits  # screening's OOM rule (tuner.search)
                dominated = ((grid.mem_gb >= grid.mem_gb[i]) & (mb >= mb[i]) & (~ckpt | ckpt[i])
                             & (accum == accum[i]) & (grid.row_len >= grid.row_len[i]))
                alive &= ~dominated
        beyond = alive & ~fits_line  # written off by the memory line alone: what a probe tests
        alive &= fits_line
        p_fit = np.empty(len(grid.configs))
        for r in np.unique(regions):
            own = ratio_of.get(int(r)) or ratios
            lr_mean = float(np.mean(own)) if own else 0.0
            lr_sd = max(0.05, float(np.std(own)) * 1.5) if len(own) >= 2 else 0.10
            at = regions == r
            p_fit[at] = surrogate.prob_fits(grid.mem_gb[at], capacity, lr_mean, lr_sd)
        # P(NCCL runs it): helper's doubt, 0.5 where a version-dependent rule may fail it and 0.25
        # where a rule says it never runs; 1 once a trial with that setting measured
        doubt = np.array([1.0 if pair in good_nccl else 1.0 if p is None else 0.25 if p[1] else 0.5
                          for p, pair in zip(grid.pair_problems, grid.pairs)])
        p_nccl = (doubt * 0.5 ** np.array([nccl_failures.get(pair, 0) for pair in grid.pairs]))[grid.pair_of]
        # unsettled version-dependent settings: expected improvement may pick them, covering does not
        unsettled = (doubt == 0.5)[grid.pair_of]

        if fixed is not None:  # an enqueued trial (the baseline): say what the model expected
            i = grid.index.get(grid.key_of_trial(fixed))
            if i is None:
                return None
            idx = np.array([i])
        else:
            idx = np.flatnonzero(alive)
            if len(idx) == 0 and not beyond.any():
                return None
        far = np.flatnonzero(beyond) if fixed is None else np.zeros(0, dtype=int)
        pend = np.array(pending, dtype=int)
        pred = self._model.predict(np.concatenate([np.array(obs_idx, dtype=int), pend, idx, far]))
        n_o, n_p, n_c = len(obs_idx), len(pend), len(idx)
        pred_obs, pred_p, pred_c, pred_far = (pred[:n_o], pred[n_o: n_o + n_p], pred[n_o + n_p: n_o + n_p + n_c],
                                              pred[n_o + n_p + n_c:])
        keep = pred_c > 0
        idx, pred_c = idx[keep], pred_c[keep]
        far, pred_far = far[pred_far > 0], pred_far[pred_far > 0]
        if len(idx) == 0 and len(far) == 0:
            return None
        good = pred_obs > 0
        obs_arr = np.array(obs_idx, dtype=int)[good] if obs_idx else np.zeros(0, dtype=int)
        x_obs, y_obs = grid.codes[obs_arr], np.array(obs_y)[good] if obs_idx else np.zeros(0)
        m_obs = np.log(pred_obs[good]) if obs_idx else np.zeros(0)
        mu, sd, beta, signal = surrogate.study_belief(
            x_obs, y_obs, m_obs, grid.codes[pend], np.log(np.maximum(pred_p, 1e-9)),
            grid.codes[np.concatenate([idx, far])], np.log(np.concatenate([pred_c, pred_far])),
            prior_sd=PRIOR_RESIDUAL_SD, noise_sd=NOISE_SD, weight_sd=MODEL_WEIGHT_SD, min_fit=MIN_FIT,
            level_sds=LEVEL_SDS, interaction_sds=INTERACTION_SDS)
        mu_far, sd_far, mu, sd = mu[len(idx):], sd[len(idx):], mu[: len(idx)], sd[: len(idx)]
        setup = self._setup_by_level(trials)   # set-up seconds per reconfiguration level, once
        seconds, levels = self._trial_seconds(setup, ok, idx, mu, mean_tokens)
        weight = p_fit[idx] * p_nccl[idx] * self._prob_within_cap(trials, seconds, levels, sd, setup)
        cover_weight = np.where(unsettled[idx], 0.0, weight)
        n_picked, how = sum(1 for t in trials if t.user_attrs.get("model_pick") in PICKS), None
        if fixed is not None:
            j, how = 0, "enqueued"
        elif (n_picked < self._n_startup or not obs_y) and len(idx):
            taken = grid.codes[np.array(obs_idx + pending, dtype=int)] if obs_idx or pending else grid.codes[:0]
            j, how = surrogate.diverse_top(mu + np.log(np.maximum(weight, 1e-9)), grid.codes[idx], taken), "startup"
        elif len(idx) and (gain := self._cover_gain(idx, launched + pending, cover_weight)).max() > 0:
            # every searched knob's levels get evidence early, whatever the model says of them
            score = mu + np.log(np.maximum(weight, 1e-9)) - np.log(seconds)
            j, how = int(np.lexsort((-score, -gain))[0]), "cover"
        if how is None and len(far):  # the memory line: the region's cheapest config beyond it, once
            probe = self._probe(trials, far, mu_far, sd_far, max(obs_y) if obs_y else -np.inf, probes or [], low)
            if probe is not None:
                params = dict(grid.configs[probe])
                k = int(np.flatnonzero(far == probe)[0])
                attrs = {"predicted_tokens_per_sec_per_gpu": round(float(math.exp(mu_far[k])), 1),
                         "predicted_rel_sd": round(float(sd_far[k]), 4), "model_pick": "probe",
                         "model_calibrated_on": len(ok), "model_weight": round(beta, 3),
                         "predicted_memory_gb": round(float(grid.mem_gb[probe]), 2)}
                return params, attrs
        if how is None and len(idx) == 0:
            return None
        if how is None:  # expected improvement per expected second of the trial (its GPUs are fixed)
            ei = surrogate.expected_improvement(mu, sd, max(obs_y)) * weight
            acq = ei / seconds
            j, how = int(np.argmax(acq)), "ei_per_cost"
            keep = levels < knobs.RECONFIGURE.index("model")
            if (self._spec.trial.resident and self.worker is not None and levels[j] >= knobs.RECONFIGURE.index("model")
                    and self.worker.keeps_model(MAX_BUILD_SHARE) and np.any(keep & (acq > 0))):
                j, how = int(np.argmax(np.where(keep, acq, -1.0))), "ei_per_cost_same_model"
        params = dict(grid.configs[int(idx[j])])
        attrs = {"predicted_tokens_per_sec_per_gpu": round(float(math.exp(mu[j])), 1),
                 "predicted_rel_sd": round(float(sd[j]), 4), "model_pick": how, "model_calibrated_on": len(ok),
                 "model_weight": round(beta, 3), "model_error_sd": round(signal, 4),
                 "model_switch": knobs.RECONFIGURE[int(levels[j])], "predicted_trial_seconds": round(float(seconds[j]), 1)}
        return params, attrs

    def _cover_gain(self, idx: np.ndarray, tried: list[int], weight: np.ndarray) -> np.ndarray:
        """Per candidate, the knob levels it would measure first (0 for candidates unlikely to
        run: weight < 0.2). Levels no candidate can reach are left to the probes."""
        codes = self.grid.codes
        return np.where(weight >= 0.2, surrogate.cover_gain(codes[idx], surrogate.covered(codes[tried], codes)), 0)

    def _probe(self, trials: list[FrozenTrial], far: np.ndarray, mu: np.ndarray, sd: np.ndarray, best: float,
               probes: list[dict[str, Any]], low: float) -> int | None:
        """The grid index of the memory probe to run now, or None: of the regions whose configs
        beyond the memory line could beat the best measured (mean + 2 sd), the one with the most
        promising such config, its probe as screening would choose it (tuner.search)."""
        grid, spec = self.grid, self._spec
        regions = grid.regions[far]
        promise = mu + 2 * sd
        for r in sorted(set(regions.tolist()), key=lambda r: -float(promise[regions == r].max())):
            if float(promise[regions == r].max()) <= best:
                break
            at = far[regions == r]
            got = memory_probe(trials, spec, grid.full[int(at[0])], probes=probes, ratio_low=low)
            if got is None:
                continue
            full = complete_params(got[0], spec)
            cell = [full.get(n) for n in MEMORY_KNOBS]
            cand = [i for i in at if [grid.full[int(i)].get(n) for n in MEMORY_KNOBS] == cell]
            if cand:
                return int(max(cand, key=lambda i: float(mu[int(np.flatnonzero(far == i)[0])])))
        return None

    def _prob_within_cap(self, trials: list[FrozenTrial], seconds: np.ndarray, levels: np.ndarray,
                         sd: np.ndarray, setup_by_level: np.ndarray) -> np.ndarray:
        """P(each candidate finishes within the cap admission will give it): budget.CAP_FACTOR x
        the larger of the coordinator's estimate (budget.estimate_from_trials, warm when this
        coordinator's worker is up) and the costliest ok trial (budget.cap_basis; the first
        estimate before one), over the world size. A trial stopped at its cap measures nothing and, in
        a resident worker, ends it. The step time scales as exp(-mu), mu ~ N(mu, sd): the trial
        fits when mu >= log(step seconds x exp(mu) / (cap - set-up)). Candidates well inside the
        cap get 1 (the pick is unchanged); one whose set-up alone exceeds it gets 0."""
        spec = self._spec
        warm = spec.trial.resident and self.worker is not None
        first = spec.first_estimate_gpu_seconds
        estimate = budget.estimate_from_trials(trials, first_estimate_gpu_seconds=first, warm=warm)
        costliest = budget.cap_basis(trials, first_estimate_gpu_seconds=first)
        cap_s = budget.CAP_FACTOR * budget.trial_cap_basis(estimate, costliest) / spec.cluster.world_size
        setup = setup_by_level[levels]
        run_s = np.maximum(seconds - setup, 1e-9)
        room = cap_s - setup
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(room, 0.0)) - np.log(run_s)) / np.maximum(sd, 1e-6)
        return scipy.stats.norm.cdf(z)

    def _setup_by_level(self, trials: list[FrozenTrial]) -> np.ndarray:
        c = self._spec.cluster
        parts = model.startup_parts(self._spec.model.preset, world_size=c.world_size, gpu=c.gpu,
                                    gpus_per_node=c.gpus_per_node)
        setup = budget.setup_seconds_by_level(parts, trials)
        return np.array([setup[lv] for lv in knobs.RECONFIGURE])

    def _trial_seconds(self, setup_by_level: np.ndarray, ok: list[FrozenTrial], idx: np.ndarray, mu: np.ndarray,
                       mean_tokens: float) -> tuple[np.ndarray, np.ndarray]:
        """(expected seconds, reconfiguration level) of running each candidate next: the set-up
        its switch needs from this coordinator's worker (all pay a start-up when trials are
        cold or no worker is up; tuner.budget, measured in this study where it has), then
        warm-up and measured steps at its predicted step time (mean steps of recent ok trials)."""
        t = self._spec.trial
        levels = self.grid.switch_levels(self.worker if t.resident else None)[idx]
        process = knobs.RECONFIGURE.index("process")
        searched = [len(s.intermediate_values) for s in ok if not s.user_attrs.get("role")][-budget.RECENT:]
        steps = float(np.mean(searched)) if searched else float(t.measure_steps)
        warmup = np.where(levels < process, min(t.warmup_steps, t.warm_warmup_steps), t.warmup_steps)
        step_s = self.grid.tokens_per_gpu_step(mean_tokens)[idx] / np.exp(mu)
        return setup_by_level[levels] + (warmup + steps) * step_s, levels


def _capacity(spec: StudySpec) -> float:
    return model.gpu_memory_gb(spec.cluster.gpu)
