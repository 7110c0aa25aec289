"""Time of one NCCL collective: NCCL's own latency/bandwidth model plus calibrated factors.

The structure is NCCL's cost model (src/graph/tuning.cc, ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``, NCCL 2.19-2.21): ``time = latency + bytes / algorithm bandwidth``,

- Ring: ``nsteps`` = n-1 for all-gather / reduce-scatter, 2(n-1) for all-reduce, of which
  ``nInterSteps`` = nodes-1 (2 nodes for all-reduce) cross the network; latency =
  ``baseLat + (nsteps - nInterSteps) * intraLat + nInterSteps * interLat``; each rank moves
  ``nsteps / n`` of the buffer, so algorithm bandwidth = bus bandwidth x n / nsteps (the
  ring factor (n-1)/n of nccl-tests' bus bandwidth).
- Tree (all-reduce only): latency ``2 ((ranks per node - 1) intraLat + log2(nodes) interLat)``,
  logarithmic in nodes where Ring's is linear in ranks; bandwidth 0.92 x bus x 1/2.
- Protocols (NCCL docs, env.html#nccl-proto; tuning.cc refinements): Simple moves full
  bandwidth at the highest latency; LL128 carries 120 payload bytes per 128-byte line
  (tuning.cc: busBw x 0.92); LL stores 4 data bytes next to a 4-byte flag in every 8-byte
  word (half the wire is flags) and tuning.cc models it at 1/3 of bus bandwidth inside a node,
  1/4 across nodes or for all-reduce, capped at ``llMaxBw`` (87.7 / 22.5 / 19.0 GB/s for
  1 / 2 / >2 nodes): the lowest latency, the worst bandwidth at large messages.
- Which algorithms a collective has: all-gather and reduce-scatter only Ring, NVLS,
  CollNetDirect (tuning.cc skips every other algorithm for them; PAT since 2.23, one GPU per
  node); Tree is all-reduce only (sjeaugey, NVIDIA/nccl#1473). A forced algorithm the
  collective lacks raises :class:`UnsupportedCollective`; the sim launcher
  records it as an `error` trial, as a real job fails. (Some older NCCL versions silently fell back to Ring instead.)
  CollNet (SHARP) is timed as Ring; NVLS as multicast in the node plus one network hop.

Bus bandwidth inside a node is NVLink per GPU per direction; across nodes a ring leaves each
node once per channel, through one NIC per channel, so the node's NICs together carry it:
``min(NVLink, gpus_per_node x NIC per GPU)``. What NCCL reaches of that nominal figure is the
calibrated ``bus_bw_efficiency``; the per-protocol and per-algorithm factors start at NCCL's
numbers above and are calibrated when a study forced them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from helper.gpus import GpuSpec

__all__ = ["UnsupportedCollective", "CollectiveChoice", "parse_nccl_setting", "choose_collective",
           "collective_time_s", "bus_bandwidth_gbs", "ALGOS", "PROTOS"]

ALGOS = ("ring", "tree", "nvls", "pat", "collnetdirect", "collnetchain", "nvlstree")
PROTOS = ("simple", "ll128", "ll")
COLLECTIVES = ("allgather", "reducescatter", "allreduce")
_ALGOS_BY_COLL = {"allgather": {"ring", "nvls", "pat", "collnetdirect"},
                  "reducescatter": {"ring", "nvls", "pat", "collnetdirect"},
                  "allreduce": {"ring", "tree", "nvls", "nvlstree", "collnetdirect", "collnetchain"}}
_NAMES = {"allgather": "AllGather", "reducescatter": "ReduceScatter", "allreduce": "AllReduce"}

# tuning.cc (NCCL 2.19-2.21): latencies in microseconds.
_BASE_LAT_US = {"ring": {"ll": 6.6, "ll128": 14.0, "simple": 8.4},
                "tree": {"ll": 6.8, "ll128": 14.0, "simple": 0.0},
                "nvls": {"simple": 0.0}, "pat": {"simple": 8.4}}
_HW_LAT_US = {  # hwLat[NVLINK | NET][algo][proto]
    "nvlink": {"ring": {"ll": 0.6, "ll128": 1.9, "simple": 3.4},
               "tree": {"ll": 0.6, "ll128": 1.25, "simple": 28.0}, "nvls": {"simple": 23.0},
               "pat": {"simple": 3.4}},
    "net": {"ring": {"ll": 2.7, "ll128": 4.0, "simple": 14.0},
            "tree": {"ll": 5.0, "ll128": 8.5, "simple": 28.0}, "nvls": {"simple": 18.0},
            "pat": {"simple": 14.0}},
}
_LL_MAX_BW_GBS = (87.7, 22.5, 19.0)  # llMaxBws[Hopper/Ampere/AMD row][1 node, 2 nodes, >2 nodes]
# gloo (the CPU proxy) ignores NCCL_ALGO/NCCL_PROTO; its ring step over loopback TCP costs
# tens of microseconds. An assumption, scaled by the calibrated collective_latency_scale.
_GLOO_STEP_LAT_US = 50.0

PRIOR_FACTORS = {"bus_bw_efficiency": 0.8, "proto_bw_factor_ll128": 0.92,
                 "proto_bw_factor_ll": 1 / 3, "algo_bw_factor_tree": 0.92,
                 "algo_bw_factor_nvls": 1.0, "algo_bw_factor_pat": 1.0,
                 "collective_latency_scale": 1.0}
"""NCCL's own model numbers (tuning.cc) used to rank choices the way NCCL's tuner does."""


class UnsupportedCollective(ValueError):
    """The forced NCCL algorithm/protocol has no implementation for a collective FSDP needs."""


@dataclass(frozen=True, kw_only=True)
class CollectiveChoice:
    """The algorithm and protocol one collective runs with."""

    algo: str
    """``ring``, ``tree``, ``nvls``, ``pat`` (lower case)."""
    proto: str
    """``simple``, ``ll128``, ``ll``."""
    forced: bool
    """True when NCCL_ALGO/NCCL_PROTO decided it, False when NCCL's tuner chose."""


def parse_nccl_setting(value: str | None, universe: tuple[str, ...]) -> dict[str, set[str]] | None:
    """``Ring``, ``^Tree``, ``allgather:ring;reducescatter:ring`` -> {collective: allowed}.

    None (or ``default``) means unset: NCCL's tuner decides.

    Example:
        >>> parse_nccl_setting("^LL", PROTOS)["allgather"] == {"simple", "ll128"}
        True
    """
    if value is None or str(value).strip().lower() in ("", "default"):
        return None
    out: dict[str, set[str]] = {}
    for part in (p for p in str(value).strip().lower().split(";") if p):
        coll, sep, names = part.partition(":")
        colls = [coll] if sep else list(COLLECTIVES)
        names = names if sep else coll
        exclude = names.startswith("^")
        chosen = {n.strip() for n in names.lstrip("^").split(",") if n.strip()}
        unknown = chosen - set(universe)
        if unknown:
            raise ValueError(f"unknown NCCL value(s) {sorted(unknown)} in {value!r}; known: {', '.join(universe)}")
        for c in colls:
            out[c] = (set(universe) - chosen) if exclude else chosen
    return out


def bus_bandwidth_gbs(gpu: GpuSpec, nodes: int, gpus_per_node: int) -> float:
    """Nominal ring bus bandwidth per GPU, GB/s: NVLink in a node, the node's NICs across."""
    if nodes <= 1:
        return gpu.intra_node_gbs
    return min(gpu.intra_node_gbs, gpus_per_node * gpu.net_gbs_per_gpu)


def _available(coll: str, algo: str, proto: str, *, gpu: GpuSpec, nodes: int,
               gpus_per_node: int, reduce_fp32: bool) -> bool:
    """Whether NCCL implements ``algo``/``proto`` for ``coll`` here (the rules of the module doc)."""
    if algo not in _ALGOS_BY_COLL[coll]:
        return False  # e.g. Tree for all-gather / reduce-scatter
    if algo != "ring" and algo != "tree" and proto != "simple":
        return False  # tuning.cc: NVLS, NVLS-Tree and CollNet are Simple only; PAT likewise
    if algo in ("nvls", "nvlstree") and (not gpu.nvls or (coll == "reducescatter" and reduce_fp32)):
        return False  # NVSwitch multicast (Hopper SXM); no fp32 reduce-scatter (nccl#1670)
    if algo == "pat" and gpus_per_node != 1:
        return False  # PAT: one GPU per node (nccl#1473)
    if proto == "ll128" and gpu.nccl_arch not in ("ampere", "hopper"):
        return False
    return True


def _raw_time_s(coll: str, nbytes: float, *, algo: str, proto: str, n: int, nodes: int,
                gpus_per_node: int, gpu: GpuSpec, c: dict[str, float]) -> float:
    """Seconds for one collective over a buffer of ``nbytes`` (the full, unsharded size)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    bus = bus_bandwidth_gbs(gpu, nodes, gpus_per_node) * 1e9 * c["bus_bw_efficiency"]
    scale = c["collective_latency_scale"]
    if gpu.nccl_arch == "none":  # gloo ring
        steps = 2 * (n - 1) if coll == "allreduce" else n - 1
        return scale * steps * _GLOO_STEP_LAT_US * 1e-6 + nbytes * steps / n / bus
    lat_algo = {"collnetdirect": "ring", "collnetchain": "ring", "nvlstree": "nvls"}.get(algo, algo)
    intra = _HW_LAT_US["nvlink"][lat_algo][proto]
    inter = _HW_LAT_US["net"][lat_algo][proto]
    multi = nodes > 1
    if proto == "ll128":
        bus *= c["proto_bw_factor_ll128"]
    elif proto == "ll":
        bus *= c["proto_bw_factor_ll"] * (0.75 if (multi or coll == "allreduce") else 1.0)
        bus = min(bus, _LL_MAX_BW_GBS[min(nodes, 3) - 1] * 1e9)
    if algo in ("ring", "collnetdirect", "collnetchain"):
        # CollNet offloads to SHARP switches through a plugin; without one NCCL cannot run it
        # faster than its Ring, which is how we time it.
        steps = 2 * (n - 1) if coll == "allreduce" else n - 1
        inter_steps = (2 * nodes if multi else 0) if coll == "allreduce" else nodes - 1
        lat_us = _BASE_LAT_US["ring"][proto] + (steps - inter_steps) * intra + inter_steps * inter
        return scale * lat_us * 1e-6 + nbytes * steps / n / bus
    if algo == "tree":  # all-reduce: up and down a tree, algorithm bandwidth = bus / 2
        lat_us = _BASE_LAT_US["tree"][proto] + 2 * ((gpus_per_node - 1) * intra
                                                   + math.log2(max(nodes, 1)) * inter)
        return scale * lat_us * 1e-6 + nbytes / (0.5 * bus * c["algo_bw_factor_tree"])
    if algo in ("nvls", "nvlstree"):  # multicast in the node; across nodes one hop, or a tree of them
        hops = (2 * math.log2(nodes) if algo == "nvlstree" else 1.0) if multi else 0.0
        lat_us = _HW_LAT_US["nvlink"]["nvls"]["simple"] + hops * _HW_LAT_US["net"]["nvls"]["simple"]
        return scale * lat_us * 1e-6 + nbytes * (n - 1) / n / (bus * c["algo_bw_factor_nvls"])
    # pat: log2(n) steps, each through the network (one GPU per node)
    lat_us = _BASE_LAT_US["pat"][proto] + math.ceil(math.log2(n)) * inter
    return scale * lat_us * 1e-6 + nbytes * (n - 1) / n / (bus * c["algo_bw_factor_pat"])


def choose_collective(coll: str, nbytes: float, *, nccl_algo: str | None, nccl_proto: str | None,
                      n: int, nodes: int, gpus_per_node: int, gpu: GpuSpec,
                      reduce_fp32: bool = True) -> CollectiveChoice:
    """The (algorithm, protocol) NCCL runs ``coll`` with: forced, or its tuner's cheapest.

    NCCL's tuner ranks the allowed pairs with its own model (:data:`PRIOR_FACTORS`); we do
    the same, among Ring (and Tree for all-reduce) x the three protocols.

    Raises:
        UnsupportedCollective: nothing allowed implements ``coll`` (e.g. NCCL_ALGO=Tree for
            an all-gather); the message reads like NCCL's.
    """
    algos = parse_nccl_setting(nccl_algo, ALGOS)
    protos = parse_nccl_setting(nccl_proto, PROTOS)
    allowed_a = algos.get(coll) if algos is not None else None
    allowed_p = protos.get(coll) if protos is not None else None
    cand_a = sorted(allowed_a) if allowed_a is not None else (
        ["ring", "tree"] if coll == "allreduce" else ["ring"])
    cand_p = sorted(allowed_p) if allowed_p is not None else list(PROTOS)
    best: tuple[float, str, str] | None = None
    for a in cand_a:
        for p in cand_p:
            if not _available(coll, a, p, gpu=gpu, nodes=nodes, gpus_per_node=gpus_per_node,
                              reduce_fp32=reduce_fp32):
                continue
            t = _raw_time_s(coll, nbytes, algo=a, proto=p, n=n, nodes=nodes,
                            gpus_per_node=gpus_per_node, gpu=gpu, c=PRIOR_FACTORS)
            if best is None or t < best[0]:
                best = (t, a, p)
    if best is None:
        dtype = "ncclFloat32" if reduce_fp32 and coll != "allgather" else "ncclBfloat16"
        raise UnsupportedCollective(
            f"NCCL WARN Error : no algorithm/protocol available for function {_NAMES[coll]} "
            f"with datatype {dtype}. NCCL_ALGO was set to {nccl_algo}, NCCL_PROTO to {nccl_proto} "
            f"({gpu.name}, {nodes} node(s) x {gpus_per_node})")
    return CollectiveChoice(algo=best[1], proto=best[2],
                            forced=allowed_a is not None or allowed_p is not None)


def collective_time_s(coll: str, nbytes: float, choice: CollectiveChoice, *, n: int, nodes: int,
                      gpus_per_node: int, gpu: GpuSpec, constants: dict[str, float]) -> float:
    """Seconds for one ``coll`` of ``nbytes`` with ``choice``, under calibrated ``constants``.

    Example:
        >>> from helper.gpus import get_gpu
        >>> h100 = get_gpu("H100-80GB")
        >>> ch = choose_collective("allgather", 4e8, nccl_algo=None, nccl_proto=None, n=8,
        ...                        nodes=1, gpus_per_node=8, gpu=h100)
        >>> ch.algo, ch.proto
        ('ring', 'simple')
        >>> round(collective_time_s("allgather", 4e8, ch, n=8, nodes=1, gpus_per_node=8,
        ...                         gpu=h100, constants=PRIOR_FACTORS) * 1e3, 2)   # ms
        1.0
    """
    c = {**PRIOR_FACTORS, **{k: v for k, v in constants.items() if k in PRIOR_FACTORS}}
    return _raw_time_s(coll, nbytes, algo=choice.algo, proto=choice.proto, n=n, nodes=nodes,
                       gpus_per_node=gpus_per_node, gpu=gpu, c=c)
