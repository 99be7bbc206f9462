"""Handlers the CLI's tests run by module path."""

from __future__ import annotations

import time

from echomq import Job


def slow(job: Job) -> None:
    time.sleep(0.02)
