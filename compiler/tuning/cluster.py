"""Where candidates are scored: in this process, in local worker processes, or on a Dask
distributed cluster (the optional extra ``wavefuse[cluster]``).

``run_jobs`` takes the list of scoring jobs and returns their results in job order, however
they were computed, so a search run serially, with ``--workers N`` or with ``--cluster`` makes
the same choices (every job is a pure function of its inputs: the simulator is
deterministic and its only random fill is seeded).

``--cluster ADDRESS`` connects to a running scheduler (``tcp://host:8786``);
``--cluster local:N`` starts a ``LocalCluster`` of N single-threaded worker processes on
this machine for the length of the run. Jobs are submitted with ``retries`` so that a job
whose worker dies is run again elsewhere; Ctrl-C cancels every job not yet finished and
closes the client (and the local cluster) before the interrupt goes on.
"""
from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed

from compiler.ir.graph import GraphError

RETRIES = 3            # a job whose worker is lost is run again, up to this many times
CONNECT_TIMEOUT_S = 10


class ClusterError(GraphError):
    """The cluster cannot be used (extra missing, scheduler unreachable, bad address)."""


def core_count() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_workers() -> int:
    """``--workers``' default: ``$WAVEFUSE_WORKERS`` when set (the test suite sets 1: pytest's
    own workers already use the cores), else every core this process may use (a tune's
    rankings and simulations are independent jobs; a serial default left half of a
    2-core machine idle)."""
    text = os.environ.get("WAVEFUSE_WORKERS", "").strip()
    if text.isdigit() and int(text) >= 1:
        return min(int(text), core_count())
    return core_count()


def cap_workers(workers: int, warn=None) -> int:
    """``--workers N`` beyond the core count only adds processes that wait for a core."""
    cores = core_count()
    if workers > cores:
        (warn or _stderr)(f"wavefuse: --workers {workers} capped at {cores}, the cores "
                          f"available to this process")
        return cores
    return workers


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def parse_address(text: str) -> tuple[str, object]:
    """``local:N`` -> ("local", N); ``tcp://host:port`` or ``host:port`` -> ("remote", addr)."""
    text = text.strip()
    if text.startswith("local:") or text == "local":
        n = text.partition(":")[2] or str(min(2, core_count()))
        if not n.isdigit() or not 1 <= int(n) <= 256:
            raise ClusterError(f"--cluster {text}: give local:N with N from 1 to 256 workers")
        return "local", int(n)
    if "://" not in text:
        text = f"tcp://{text}"
    scheme, _, rest = text.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme not in ("tcp", "tls", "inproc", "ucx", "ws", "wss") or not host or \
            not port.isdigit():
        raise ClusterError(f"--cluster {text}: expected a scheduler address such as "
                           f"tcp://10.0.0.5:8786, or local:N")
    return "remote", text


def _import_distributed():
    try:
        import distributed  # an optional dependency (the extra wavefuse[cluster])
    except ImportError:
        raise ClusterError("--cluster needs Dask distributed: pip install 'wavefuse[cluster]' "
                           "(or run without --cluster)") from None
    return distributed


class Cluster:
    """A Dask client for one run (and the LocalCluster it started, if any)."""

    def __init__(self, address: str):
        self.address = address
        self.kind, self.target = parse_address(address)
        self.client = None
        self.local = None

    def __enter__(self):
        distributed = _import_distributed()
        try:
            if self.kind == "local":
                self.local = distributed.LocalCluster(
                    n_workers=self.target, threads_per_worker=1, processes=True,
                    dashboard_address=None, silence_logs=50)
                self.client = distributed.Client(self.local)
            else:
                self.client = distributed.Client(self.target, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            self.__exit__(None, None, None)
            raise ClusterError(f"--cluster {self.address}: cannot reach the Dask scheduler "
                               f"({' '.join(str(exc).split())[:160]}); start one with "
                               f"`dask scheduler` or use local:N") from None
        return self

    def __exit__(self, *exc):
        for obj in (self.client, self.local):
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # noqa: BLE001 - closing after a failure must not mask it
                    pass
        self.client = self.local = None
        return False

    def map(self, fn, jobs, shared=None, on_done=None) -> list:
        """``[fn(shared, j) for j in jobs]`` on the cluster, in job order; ``shared`` (the
        graph) is sent to every worker once; ``on_done(i)`` as each job finishes."""
        distributed = _import_distributed()
        client = self.client
        shared_f = client.scatter(shared, broadcast=True, hash=False)
        tag = f"wavefuse-score-{os.getpid()}-{next(_RUNS)}"
        futures = client.map(_call, jobs, fn=fn, shared=shared_f, retries=RETRIES,
                             pure=False, key=[f"{tag}-{i}" for i in range(len(jobs))])
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for f in distributed.as_completed(futures):
                if on_done:
                    on_done(index[f.key])
            return client.gather(futures)
        except BaseException:
            client.cancel(futures + [shared_f], force=True)
            raise
        finally:
            del shared_f


_RUNS = itertools.count()
_SHARED: dict = {}


def _call(job, fn, shared):
    return fn(shared, job)


def _set_shared(shared) -> None:
    _SHARED["value"] = shared


def _call_with_shared(fn, job):
    return fn(_SHARED["value"], job)


#: the process pool of ``worker_pool`` while one is open, and the objects its workers
#: inherited (by ``id`` in this process, the key a job names them by)
_POOL: dict = {}


def _call_registered(fn, key, job):
    return fn(_POOL["shared"][key], job)


@contextlib.contextmanager
def worker_pool(workers: int):
    """One process pool for a whole tune: inside it, ``run_jobs`` with ``workers > 1`` on
    an object passed to ``share`` uses one pool, started at its first use, instead of a
    pool per round.

    Why: a model's tune runs hundreds of rounds (a ranking per distinct dispatch, a round
    of simulations per search step); a pool per round paid its start (and the workers'
    first touch of the parent's memory) every time, about 40 s of CPU on BERT-base's
    tune. The workers are forked after the shared objects (the plans' graphs, weights
    included) are in memory, so they inherit them instead of receiving them pickled; an
    object shared after the fork, or a platform without fork, gets a pool per round."""
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods() or _POOL:
        yield
        return
    _POOL.update(workers=workers, shared={}, pool=None)
    try:
        yield
    finally:
        pool = _POOL.get("pool")
        _POOL.clear()
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def share(*objects) -> None:
    """Objects the open ``worker_pool``'s workers will inherit (before its first use)."""
    if _POOL and _POOL["pool"] is None:
        _POOL["shared"].update({id(x): x for x in objects})


def _pool_for(shared):
    if not _POOL or id(shared) not in _POOL["shared"]:
        return None
    if _POOL["pool"] is None:
        _POOL["pool"] = ProcessPoolExecutor(max_workers=_POOL["workers"],
                                            mp_context=multiprocessing.get_context("fork"))
    return _POOL["pool"]


def run_jobs(fn, jobs: list, *, shared=None, workers: int = 1, cluster=None,
             on_done=None) -> list:
    """``[fn(shared, j) for j in jobs]``, serially, in processes, or on a ``Cluster``;
    ``shared`` goes to each process once, not with every job."""
    if not jobs:
        return []
    if cluster is not None:
        return cluster.map(fn, jobs, shared, on_done)
    if workers <= 1 or len(jobs) == 1:
        out = []
        for i, j in enumerate(jobs):
            out.append(fn(shared, j))
            if on_done:
                on_done(i)
        return out
    results = [None] * len(jobs)
    pool = _pool_for(shared)
    if pool is not None:
        return _gather(pool, lambda pool, j: pool.submit(_call_registered, fn, id(shared), j),
                       jobs, results, on_done)
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), initializer=_set_shared,
                             initargs=(shared,)) as pool:
        return _gather(pool, lambda pool, j: pool.submit(_call_with_shared, fn, j), jobs,
                       results, on_done)


def _gather(pool, submit, jobs, results, on_done) -> list:
    futures = {submit(pool, j): i for i, j in enumerate(jobs)}
    try:
        for f in as_completed(futures):
            i = futures[f]
            results[i] = f.result()
            if on_done:
                on_done(i)
    except BaseException:
        for f in futures:
            f.cancel()
        raise
    return results
