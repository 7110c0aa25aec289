"""helper.collectives: NCCL's algorithm/protocol choice and its cost model."""

from __future__ import annotations

import pytest

from helper import GPUS, UnsupportedCollective, predict_throughput
from helper.collectives import CollectiveChoice, choose_collective, collective_time_s

H100 = GPUS["H100-80GB"]


def test_ll_is_slower_than_simple_at_large_messages_and_faster_at_tiny_ones():
    for nodes in (1, 4):
        n = 8 * nodes
        kw = dict(n=n, nodes=nodes, gpus_per_node=8, gpu=H100, constants={})
        big, tiny = 4e8, 4e3
        ll = CollectiveChoice(algo="ring", proto="ll", forced=True)
        simple = CollectiveChoice(algo="ring", proto="simple", forced=True)
        ll128 = CollectiveChoice(algo="ring", proto="ll128", forced=True)
        assert collective_time_s("allgather", big, ll, **kw) > 2 * collective_time_s("allgather", big, simple, **kw)
        assert collective_time_s("allgather", big, ll128, **kw) > collective_time_s("allgather", big, simple, **kw)
        assert collective_time_s("allgather", tiny, ll, **kw) < collective_time_s("allgather", tiny, simple, **kw)
    for n in (8, 32):
        slow = predict_throughput("7b", n, micro_batch=1, nccl_proto="LL")
        fast = predict_throughput("7b", n, micro_batch=1, nccl_proto="Simple")
        assert slow < fast


def test_default_lets_nccl_choose_like_its_tuner():
    def pick(nbytes, nodes):
        return choose_collective("allgather", nbytes, nccl_algo="default", nccl_proto=None,
                                 n=8 * nodes, nodes=nodes, gpus_per_node=8, gpu=H100)
    assert (pick(4e8, 1).algo, pick(4e8, 1).proto) == ("ring", "simple")
    assert pick(8e3, 1).proto == "ll" and not pick(8e3, 1).forced
    # Tree's latency grows with log2(nodes), Ring's with ranks: small all-reduces go to Tree at scale.
    def ar(nodes):
        return choose_collective("allreduce", 1e6, nccl_algo=None, nccl_proto=None,
                                 n=8 * nodes, nodes=nodes, gpus_per_node=8, gpu=H100)
    assert ar(1).algo == "ring" and ar(64).algo == "tree"


def test_tree_has_no_allgather_so_forcing_it_under_fsdp_fails():
    with pytest.raises(UnsupportedCollective, match="no algorithm/protocol available for function AllGather"):
        predict_throughput("7b", 8, nccl_algo="Tree")
    assert predict_throughput("7b", 8, nccl_algo="Tree", sharding="ddp") > 0      # all-reduce has Tree
    assert predict_throughput("7b", 8, nccl_algo="allreduce:tree") > 0          # per-collective: others free
    with pytest.raises(UnsupportedCollective):
        predict_throughput("7b", 8, nccl_algo="NVLS")        # NVLS reduce-scatter has no fp32 reduction
    with pytest.raises(UnsupportedCollective):
        predict_throughput("7b", 8, gpu="A100-80GB", nccl_algo="allgather:nvls")  # no NVSwitch multicast
    with pytest.raises(ValueError, match="unknown NCCL"):
        predict_throughput("7b", 8, nccl_proto="Fast")


def test_an_nccl_setting_is_a_set_per_collective_and_default_is_unset():
    from helper.collectives import COLLECTIVES, PROTOS, parse_nccl_setting

    assert parse_nccl_setting(None, PROTOS) is None and parse_nccl_setting("Default", PROTOS) is None
    every = parse_nccl_setting("Simple", PROTOS)
    assert set(every) == set(COLLECTIVES) and all(v == {"simple"} for v in every.values())
    assert parse_nccl_setting("^LL", PROTOS)["allgather"] == set(PROTOS) - {"ll"}
    per = parse_nccl_setting("allgather:ll;reducescatter:simple", PROTOS)
    assert per == {"allgather": {"ll"}, "reducescatter": {"simple"}}
    with pytest.raises(ValueError, match="unknown NCCL value"):
        parse_nccl_setting("allgather:fast", PROTOS)


def test_the_bus_bandwidth_is_nvlink_in_a_node_and_the_nics_across_nodes():
    from helper.collectives import bus_bandwidth_gbs

    assert bus_bandwidth_gbs(H100, 1, 8) == H100.intra_node_gbs
    assert bus_bandwidth_gbs(H100, 4, 8) == min(H100.intra_node_gbs, 8 * H100.net_gbs_per_gpu)
    assert bus_bandwidth_gbs(H100, 4, 1) == min(H100.intra_node_gbs, H100.net_gbs_per_gpu)
