"""Run one workflow step: its output goes to the rule's log, and a failure the user can act on
ends the job with one sentence (in the log and on stderr) instead of a traceback."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import EvidenceError, GPUFault


def run_step(log_path: str | Path | None, step: Callable[[], Any]) -> Any:
    log = Path(log_path) if log_path else None
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")  # a fresh log per run; every writer below appends to it
    with open(log, "a") if log else contextlib.nullcontext(sys.stderr) as fh:
        with contextlib.redirect_stdout(fh):
            try:
                return step()
            except EvidenceError as exc:
                print(str(exc), file=fh, flush=True)
                if fh is not sys.stderr:
                    print(str(exc), file=sys.stderr, flush=True)
                if isinstance(exc, GPUFault):
                    fh.flush()
                    os._exit(1)  # a dead CUDA context: skip the teardown and its noise
                sys.exit(1)


def preload(*modules: str) -> threading.Thread:
    """Import these libraries (heavy ones a step needs only later: pandas, sqlite_utils) in a
    background thread, so that their import overlaps a wait, a group process under nsys or ncu,
    instead of lengthening the job by it. Returns the thread. A library that fails to import is
    left to the step's own import of it, which says why where it is used."""

    def load() -> None:
        for name in modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    thread = threading.Thread(target=load, name="preload", daemon=True)
    thread.start()
    return thread
