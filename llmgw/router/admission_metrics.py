"""The admission queue's Prometheus metrics: names, labels, and how queue length is derived.

metrics.py adds these to its counters and histograms, so they are counted on the hot path
like the rest and merge across worker processes with no code of their own:

    llmgw_admission_enqueued_total{model,group,priority}          requests that had to wait
    llmgw_admission_dequeued_total{model,group,priority,outcome}  waits that ended: started |
                                                                  shed (queue full) | timeout | left
    llmgw_admission_refused_total{model,group,priority,reason}    refused at the door or shed:
                                                                  queue_full | timeout
    llmgw_admission_wait_seconds{model,group,priority}            arrival to start, every
                                                                  admitted request (0: no wait)
    llmgw_admission_queue_length{model,group,priority}            gauge: enqueued - dequeued

Queue length is a difference of two counters rather than a gauge read from the scheduler,
so the supervisor of several workers reports the sum over them from their snapshots.
Labels are bounded: models from the state, groups from the store (operators name them;
keys never appear), priorities and outcomes are constants.
"""

from __future__ import annotations

from collections.abc import Mapping

COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admission_enqueued": ("Requests that waited for a slot of their model", ("model", "group", "priority")),
    "admission_dequeued": ("Waits for a slot that ended, by outcome: started, shed, timeout, left",
                           ("model", "group", "priority", "outcome")),
    "admission_refused": ("Requests refused by admission: queue_full (shed, lowest class first) or timeout",
                          ("model", "group", "priority", "reason")),
}
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...], tuple[float, ...]]] = {
    "admission_wait_seconds": ("Time from arrival to a slot of the model (0 when one was free)",
                               ("model", "group", "priority"), WAIT_BUCKETS),
}
QUEUE_LENGTH = ("llmgw_admission_queue_length", "Requests waiting for a slot of their model")


def queue_lengths(counters: Mapping[str, Mapping[tuple[str, ...], int]]) -> dict[tuple[str, ...], int]:
    """(model, group, priority) -> waiting now, from the enqueued and dequeued counters."""
    out = dict(counters.get("admission_enqueued", {}))
    for (model, group, priority, _outcome), n in counters.get("admission_dequeued", {}).items():
        key = (model, group, priority)
        out[key] = out.get(key, 0) - n
    return out
