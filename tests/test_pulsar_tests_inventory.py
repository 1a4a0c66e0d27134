"""docs/pulsar-channel-tests.md lists exactly the @Test methods of Pulsar's channel test classes,
and every test of ours it names exists.

The method names are data read from Pulsar's sources (ServiceUnitStateChannelTest, the syncer's test
in ExtensibleLoadManagerImplTest, MetadataStoreTableViewTest); the page is the table a reader scans.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "pulsar-channel-tests.md"

CHANNEL_TESTS = {
    "channelOwnerTest",
    "channelValidationTest",
    "assignmentTest",
    "assignmentTestWhenOneAssignmentFails",
    "transferTest",
    "transferTestWhenDestBrokerFails",
    "splitAndRetryTest",
    "handleMetadataSessionEventTest",
    "handleBrokerCreationEventTest",
    "handleBrokerDeletionEventTest",
    "conflictAndCompactionTest",
    "ownerLookupCountTests",
    "unloadTest",
    "assignTestWhenDestBrokerProducerFails",
    "splitTestWhenTableViewPutFails",
    "testIsOwner",
    "testGetOwnerAsync",
    "splitAndRetryFailureTest",
    "testOverrideInactiveBrokerStateData",
    "testOverrideOrphanStateData",
    "testActiveGetOwner",
    "testGetOwnershipEntrySetBeforeChannelStart",
    "unloadTimeoutCheckTest",
}
STORE_AND_SYNCER_TESTS = {
    "ExtensibleLoadManagerImplTest.testLoadBalancerServiceUnitTableViewSyncer",
    *(
        f"MetadataStoreTableViewTest.{name}"
        for name in (
            "emptyTableViewTest",
            "concurrentPutTest",
            "conflictResolverTest",
            "deleteTest",
            "mapApiTest",
            "notificationListeners",
            "testConcurrentPutGetOneKey",
            "testConcurrentPut",
            "testConcurrentDelete",
            "testClosedMetadataStore",
            "testGetIfCachedDistributed",
            "testInitialFill",
        )
    ),
}
STATUSES = ("**covered**", "**partly**", "**not yet**", "**no**")


def rows(section: str) -> dict[str, str]:
    """The table rows under a level-2 heading, keyed by the first cell's code name."""
    text = PAGE.read_text()
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    found: dict[str, str] = {}
    for line in body.splitlines():
        match = re.match(r"\| `([A-Za-z.]+)`", line)
        if match:
            assert match.group(1) not in found, f"{match.group(1)} is listed twice"
            found[match.group(1)] = line
    return found


def test_the_page_lists_exactly_the_channel_tests() -> None:
    assert set(rows("ServiceUnitStateChannelTest")) == CHANNEL_TESTS


def test_the_page_lists_exactly_the_syncer_and_store_view_tests() -> None:
    assert set(rows("The syncer and the metadata-store table view")) == STORE_AND_SYNCER_TESTS


def test_each_row_says_how_it_stands() -> None:
    every = {**rows("ServiceUnitStateChannelTest"), **rows("The syncer and the metadata-store table view")}
    for name, line in every.items():
        status = line.rsplit("|", 2)[-2]
        assert any(s in status for s in STATUSES), f"{name}: no status in its last column"


def test_every_test_of_ours_the_page_names_exists() -> None:
    named = set(re.findall(r"`((?:tests|properties)/[\w/]+\.py)::(\w+)`", PAGE.read_text()))
    assert named, "the page names none of our tests"
    missing = []
    for path, name in sorted(named):
        source = ROOT / path
        if not source.exists():
            missing.append(f"{path} (no such file)")
            continue
        functions = {n.name for n in ast.walk(ast.parse(source.read_text())) if isinstance(n, ast.FunctionDef)}
        if name not in functions:
            missing.append(f"{path}::{name}")
    assert missing == []
