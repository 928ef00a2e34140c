"""Worker models that train a round's clients side by side in one process (``fabric.workers``).

A round's clients are independent until aggregation, so a process can train several at
once: one worker model per thread, each folding its clients' payloads into its own
accumulator. PyTorch releases the GIL inside its kernels, so the threads really run in
parallel, and the process's intra-op threads are split among them. On a CPU with small
local batches this beats one model on every core: a 20-image SimCLR step of the 3-layer
CNN does not keep two OpenMP threads busy, two models of one thread each do (the
cross-device workload's rounds in BENCHMARKS.md), and unlike a second process
(``fabric.devices``) a second worker costs one model's memory, not a second copy of torch.

Results do not depend on thread timing: clients are dealt to workers by a fixed rule
(``deal_clients``), each worker trains its clients in order from a generator keyed by
(seed, round, client), and the accumulators are summed in worker order. With one worker
nothing runs in a thread, exactly as before workers existed.
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, TypeVar

import torch

from fedlight.methods.federated_module import FederatedModule

State = dict[str, torch.Tensor]
T = TypeVar("T")
J = TypeVar("J")


def sum_states(states: list[State | None]) -> State | None:
    """Key-wise sum of accumulators, in list order (the ``None`` of a worker that trained nobody skipped)."""
    present = [s for s in states if s is not None]
    if not present:
        return None
    total = dict(present[0])
    for s in present[1:]:
        total = {k: total[k] + s[k] for k in total}
    return total


class Workers:
    """``count`` worker models (the first one is ``module`` itself) and the threads that run them.

    Args:
        module: the process's worker model, already on its device.
        count: worker models (``fabric.workers``).
        threads: the process's intra-op threads, split evenly among the workers (at least one
            each); the calling thread keeps all of them (evaluation runs there).
    """

    def __init__(self, module: FederatedModule, count: int, threads: int) -> None:
        self.modules = [module] + [copy.deepcopy(module) for _ in range(count - 1)]
        self.threads_each = max(1, threads // count)
        self._pool: ThreadPoolExecutor | None = None
        if count > 1:  # torch.set_num_threads in a thread sets that thread's OpenMP team size only
            self._pool = ThreadPoolExecutor(count, thread_name_prefix="fedlight-worker",
                                            initializer=torch.set_num_threads, initargs=(self.threads_each,))

    def __len__(self) -> int:
        return len(self.modules)

    def map(self, fn: Callable[[FederatedModule, J], T], jobs: list[J]) -> list[T]:
        """``fn(module_i, jobs[i])`` for every worker i, in parallel threads; results in worker order.

        The first exception a worker raised is re-raised here once every worker has finished.
        """
        if self._pool is None:
            return [fn(self.modules[0], jobs[0])]
        futures = [self._pool.submit(fn, m, job) for m, job in zip(self.modules, jobs)]
        while wait(futures, timeout=0.2).not_done:  # the main thread wakes to run a signal's handler (SIGTERM:
            pass  # the workers stop between clients), which an untimed wait left for the round's end
        return [f.result() for f in futures]

    def each(self, fn: Callable[[FederatedModule], T]) -> list[T]:
        """``fn(module)`` for every worker model, in this thread (e.g. a new learning rate)."""
        return [fn(m) for m in self.modules]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
