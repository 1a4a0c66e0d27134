"""The bench's machines on the current protocol: every store kind, the ``ci`` (or ``deep``) profile."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import settings

from properties.bench import RUNS_DIR_ENV, MetadataStoreBench, SyncerBench, SystemTopicBench
from properties.hunts import HUNTS, hunt
from statechan.invariants.catalogue import step_ids

STEPS = 30

TestSystemTopicBench = SystemTopicBench.TestCase
TestSystemTopicBench.settings = settings(stateful_step_count=STEPS)

TestMetadataStoreBench = MetadataStoreBench.TestCase
TestMetadataStoreBench.settings = settings(stateful_step_count=STEPS)

TestSyncerBench = SyncerBench.TestCase
TestSyncerBench.settings = settings(stateful_step_count=STEPS)


class StepFormsOnly(MetadataStoreBench):
    """The store machine with the teardown's history check off: what it finds, the checks after
    each step found."""

    def _check_histories(self) -> None:
        pass


def test_the_bench_finds_24186_by_its_step_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each step's check compares the observation with the one before: with the history check
    off, the bench still finds #24186 put back, by a step form (the channel's version going
    from one value to another), at the step that writes it."""
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path))
    (h,) = (h for h in HUNTS if h.variant == "24186")
    failure = hunt(dataclasses.replace(h, machine=StepFormsOnly), shrink=False)
    assert failure is not None, "not found by the step forms"
    assert set(failure.invariants) <= set(step_ids()), str(failure)
    step_words = r"BROKEN (one-value-per-version|version-monotonic) \[[^]]+\]: the channel('s version \d+)? went from "
    assert re.search(step_words, str(failure)), str(failure)
