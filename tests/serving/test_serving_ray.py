"""End to end on a real local Ray cluster of two nodes (``ray start`` twice, on 127.0.0.1).

:func:`benchmarks.serving.ray_scenario` checks every answer against eager PyTorch; the tests
below check what it recorded.
"""

from __future__ import annotations

import os

import pytest
from benchmarks.serving import TABLE_HEADER, ray_scenario

# FXVINO_SERVING=full (make test-serving): ResNet-50 and BERT-base, Inductor as a third backend.
FULL = os.environ.get("FXVINO_SERVING", "").strip().lower() == "full"
REQUESTS = 200 if FULL else 100


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    return ray_scenario(
        tmp_path_factory.mktemp("ray"), tiny=not FULL, requests=REQUESTS, concurrency=8, compare_replicas=FULL
    )


def test_two_replicas_on_two_nodes_answer_correctly(cluster_run):
    assert cluster_run["nodes"] == 2
    replicas = cluster_run["replicas"]
    assert len(replicas) == 2
    assert len({r["node_id"] for r in replicas.values()}) == 2  # one replica per node (1 CPU each)
    for n in (1, 2) if FULL else (2,):  # 1 vs 2 replicas: in the full run
        assert len(cluster_run[f"replicas_{n}"].answers) == REQUESTS
    print("\n" + TABLE_HEADER + "\n" + "\n".join(cluster_run["table"]))


def test_new_replicas_start_warm_from_the_model_cache(cluster_run):
    # Full run: the replicas of the scale-up that were not there before (the first one filled the
    # cache). Short run: the two first replicas compile (cold); the replacement of the killed one is new.
    first = cluster_run.get("first_replicas", {})
    new = [r for pid, r in cluster_run["replicas"].items() if pid not in first] if FULL else []
    new += [r for pid, r in cluster_run["after_kill"].items() if pid not in cluster_run["replicas"]]
    assert new
    for replica in new:
        assert replica["serving"] == "fxvino" and replica["fallbacks"] == []
        assert replica["cache"]["hits"] >= 2 and replica["cache"]["misses"] == 0, replica["cache"]


def test_killing_a_replica_mid_load_loses_no_request(cluster_run):
    assert cluster_run["killed"]["replicas_before"] == 2
    # Every request was answered and correct (checked in the scenario), retried or not.
    print(f"\nclient retries after the kill: {cluster_run['retries']}")
    after = cluster_run["after_kill"]
    assert len(after) == 2
    replacement = [r for pid, r in after.items() if pid not in cluster_run["replicas"]]
    assert len(replacement) == 1 and replacement[0]["cache"]["misses"] == 0
