"""The bench's machines on the current protocol: every store kind, the ``ci`` (or ``deep``) profile."""

from __future__ import annotations

from hypothesis import settings

from properties.bench import MetadataStoreBench, SyncerBench, SystemTopicBench

STEPS = 30

TestSystemTopicBench = SystemTopicBench.TestCase
TestSystemTopicBench.settings = settings(stateful_step_count=STEPS)

TestMetadataStoreBench = MetadataStoreBench.TestCase
TestMetadataStoreBench.settings = settings(stateful_step_count=STEPS)

TestSyncerBench = SyncerBench.TestCase
TestSyncerBench.settings = settings(stateful_step_count=STEPS)
