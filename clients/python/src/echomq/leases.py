"""When a worker renews its running jobs' leases: every job once a round (``renew_every`` of
the lease), and sooner a job whose last renewal's lease ends before the next round, which only
an attempt's deadline makes it do (``timeout``): renewed again just past that end, the worker
hears ``EMQTIMEOUT`` then, not a round late. Pure: ``Worker`` and ``AsyncWorker`` send the
renewals."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

if TYPE_CHECKING:
    from .job import Job

#: How long past a lease's end, in seconds, the first renewal before a round waits. Each
#: further one of the same attempt waits twice as long past the end its renewal answered, and
#: none is planned past the next round: a client clock ahead of the server's, by which each
#: lease end has passed already, renews an attempt a few more times, not every moment.
LATE = 0.01


def renew_at(
    ends_ms: Optional[int], answered_ns: int, now: float, next_round: float, early: int
) -> Optional[float]:
    """When (``time.monotonic()``; `now` when the reply came) to renew again a job whose
    renewal answered that its lease ends at `ends_ms` (the server's unix ms; `answered_ns`, the
    reply's wall time): ``LATE`` past that end, doubled for each of the `early` renewals the
    attempt had before a round, if that comes before `next_round`. ``None`` otherwise, and with
    no lease end (a refusal, a failure): the next round renews it."""
    if ends_ms is None:
        return None
    at = now + max(ends_ms / 1000 - answered_ns / 1e9, 0.0) + LATE * 2**early
    return at if at < next_round else None


def renewing(job: Job) -> bool:
    """Whether the job's lease is still renewed: not lost, its attempt not ended by the server
    (cancelled, timed out), and its outcome not on its way (a settle decides the attempt)."""
    return not (job.lease_lost.is_set() or job._over or job._phase == "ended")


def due(
    jobs: List[Job], next_round: float, now: float, interval: float
) -> Tuple[List[Job], float]:
    """The jobs to renew at `now` (``time.monotonic()``) and when the round after comes: every
    one still renewed once the round came, else those whose lease ends before it."""
    jobs = [j for j in jobs if renewing(j)]
    if now >= next_round:
        return jobs, now + interval
    return [j for j in jobs if j._renew_at is not None and j._renew_at <= now], next_round


def wake(jobs: List[Job], next_round: float) -> float:
    """When the renewer looks again (``time.monotonic()``): the next round, or sooner the end
    of a lease that ends before it."""
    early = [j._renew_at for j in jobs if j._renew_at is not None and renewing(j)]
    return min([next_round, *early])
