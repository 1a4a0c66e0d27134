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


PORTS = ROOT / "tests" / "test_pulsar_ports.py"


def ports() -> dict[str, tuple[str, int | None]]:
    """Each port in tests/test_pulsar_ports.py: the Pulsar test it is named after, and the
    docs/fidelity.md entry its expected-failure mark waits on (None: no such mark)."""
    found: dict[str, tuple[str, int | None]] = {}
    for node in ast.parse(PORTS.read_text()).body:
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
            continue
        names = {n: n for n in CHANNEL_TESTS} | {n.replace(".", "_"): n for n in STORE_AND_SYNCER_TESTS}
        named = [names[n] for n in names if node.name == f"test_{n}" or node.name.startswith(f"test_{n}_")]
        assert named, f"{node.name} names no Pulsar test this page lists"
        entry = None
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.mark.xfail":
                reason = {k.arg: k.value for k in decorator.keywords}.get("reason")
                assert isinstance(reason, ast.Constant), f"{node.name}: an xfail without a reason"
                match = re.search(r"docs/fidelity\.md entry (\d+)", str(reason.value))
                assert match, f"{node.name}: its xfail names no docs/fidelity.md entry"
                entry = int(match.group(1))
        found[node.name] = (max(named, key=len), entry)
    return found


def test_every_port_is_named_on_its_pulsar_tests_row() -> None:
    listed = {**rows("ServiceUnitStateChannelTest"), **rows("The syncer and the metadata-store table view")}
    found = ports()
    assert found, "no ports"
    for port, (pulsar, _) in found.items():
        assert f"tests/test_pulsar_ports.py::{port}`" in listed[pulsar], f"{pulsar}'s row does not name {port}"


def test_every_expected_failure_says_which_divergence_it_waits_on() -> None:
    text = PAGE.read_text()
    table = text.split("### Expected failures", 1)[1].split("\n## ", 1)[0]
    waiting = {port: entry for port, (_, entry) in ports().items() if entry is not None}
    listed = {
        match.group(1): int(match.group(2))
        for match in re.finditer(r"`tests/test_pulsar_ports\.py::(\w+)`.*entry (\d+) \|", table)
    }
    assert listed == waiting
