"""Model files: validation errors that name the file, key and problem; packaging of built-ins."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from statechan import ModelError, builtin_model_names, load_model
from statechan.model import parse_model

ROOT = Path(__file__).resolve().parent.parent

MINIMAL = """
name = "mini"
states = ["Init", "Assigning", "Owned"]
initial = "Init"
in_flight = ["Assigning"]
active = ["Assigning", "Owned"]
stable = ["Init", "Owned"]
terminal = ["Owned"]
{extra}
[[transitions]]
from = "Init"
to = "Assigning"
{edge}
[[transitions]]
from = "Assigning"
to = "Owned"
"""


def model_text(extra: str = "", edge: str = "") -> str:
    return MINIMAL.format(extra=extra, edge=edge)


def test_minimal_model_loads_and_answers() -> None:
    m = parse_model(model_text(), "mini.toml")
    assert m.is_valid_transition("Init", "Assigning")
    assert not m.is_valid_transition("Owned", "Init")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name = [", "mini.toml: not valid TOML"),
        (
            model_text().replace('to = "Owned"', 'to = "Owner"'),
            "mini.toml: (top level): Value error, transitions[1] (Assigning -> Owner): unknown state 'Owner'",
        ),
        (model_text(edge='checks = ["same-broker"]'), "mini.toml: transitions.0.checks.0: Input should be"),
        (model_text(edge='flows = ["assign"]'), "flow 'assign' is not declared under [[flows]]"),
        (model_text(edge='storages = ["Zookeeper"]'), "mini.toml: transitions.0.storages.0: Input should be"),
        (model_text(edge='colour = "red"'), "mini.toml: transitions.0.colour: Extra inputs are not permitted"),
        (model_text().replace('initial = "Init"', 'initial = "Start"'), "initial: unknown state 'Start'"),
        (model_text().replace('name = "mini"\n', ""), "mini.toml: name: Field required"),
        (model_text() + '[[transitions]]\nfrom = "Init"\nto = "Assigning"\n', "declared twice for SystemTopic"),
        (
            model_text().replace('"Init", "Assigning", "Owned"]', '"Init", "Assigning", "Owned", "Assigned"]')
            + "[resolver]\n"
            'version_gap = { SystemTopic = "accept" }\n',
            "not ServiceUnitState members",
        ),
        (model_text() + "[resolver]\n", "resolver.version_gap: missing a policy for SystemTopic"),
        (model_text() + '[resolver]\nversion_gap = { SystemTopic = "maybe" }\n', "resolver.version_gap.SystemTopic"),
        (model_text(edge='to = "Init"').replace('to = "Assigning"\nto = "Init"', 'to = "Init"'), "to itself"),
    ],
)
def test_malformed_model_is_reported_with_file_key_and_problem(text: str, expected: str) -> None:
    with pytest.raises(ModelError) as info:
        parse_model(text, "mini.toml")
    assert expected in str(info.value)


def test_missing_model_file(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"nope\.toml: cannot read the model file"):
        load_model(tmp_path / "nope.toml")


def test_unknown_builtin_lists_the_known_ones() -> None:
    with pytest.raises(ModelError, match=r"built-in models: .*pulsar-4"):
        load_model("pulsar-9")


def test_model_from_a_file_path(tmp_path: Path) -> None:
    path = tmp_path / "mini.toml"
    path.write_text(model_text())
    assert load_model(str(path)).name == "mini"


def test_required_builtin_models_exist() -> None:
    assert {"pulsar-4", "pulsar-3.0", "pip-192-design"} <= set(builtin_model_names())
    assert load_model().name == "pulsar-4"


@pytest.mark.slow
def test_the_wheel_ships_the_builtin_models(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("statechan-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in builtin_model_names():
        assert f"statechan/models/{name}.toml" in names


@pytest.mark.parametrize(
    "body",
    [
        "drop_transitions = 5\n",
        "storages = 3\n",
        "drop_flows = [[1]]\n",
        'transitions = "Owned"\n',
        "drop_transitions = [1]\n",
        "resolver = 7\n",
    ],
)
def test_a_variant_with_a_key_of_the_wrong_type_is_a_model_error(body: str) -> None:
    """A variant file's keys come from a user (or a saved run names the file): a wrong TOML type
    is a ModelError naming the file, never a TypeError out of the merge."""
    with pytest.raises(ModelError, match=r"odd\.toml"):
        parse_model('variant_of = "pulsar-4"\n' + body, "odd.toml")


def test_a_model_file_rewritten_in_place_is_read_again(tmp_path: Path) -> None:
    """Same path, same size, same modification time, other content (two mutants written within
    the clock's resolution): the model, and the protocol's set-up made from it, follow the content."""
    import os

    from statechan.cluster import protocol
    from statechan.cluster.config import SimConfig, StoreKind, Variant
    from statechan.states import StorageType

    text = (Path(__file__).resolve().parent.parent / "models" / "pulsar-4.toml").read_text(encoding="utf-8")
    line = 'version_gap = { SystemTopic = "accept", MetadataStore = "reject" }'
    assert line in text
    path = tmp_path / "model.toml"
    path.write_text(text, encoding="utf-8")
    stamp = os.stat(path).st_mtime_ns
    config = SimConfig(store=StoreKind.metadata_store, variant=Variant(model=str(path)))
    assert not load_model(str(path)).rules(StorageType.MetadataStore).gap_accepted
    assert not protocol.setup(config).store_rules.gap_accepted
    path.write_text(text.replace(line, line.replace('"reject"', '"accept"')), encoding="utf-8")
    os.utime(path, ns=(stamp, stamp))
    assert load_model(str(path)).rules(StorageType.MetadataStore).gap_accepted
    assert protocol.setup(config).store_rules.gap_accepted
