"""Protocol models: each version of the channel's state graph and resolver rules, declared as data.

A model file (TOML, in ``models/``) is the one place a transition table is written down. This
module validates it and compiles it into the lookup tables everything else reads: the resolver,
``is_valid_transition``, the networkx graphs, the ``transitions`` machine and the diagrams.
"""

from __future__ import annotations

import copy
import enum
import functools
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from statechan.states import ServiceUnitState, StorageType

DEFAULT_MODEL = "pulsar-4"


class ModelError(ValueError):
    """A model file that cannot be used; the message names the file, the key and the problem."""


class BrokerCheck(enum.Enum):
    """A broker-consistency rule the resolver applies to one transition (``checkBrokers``).

    Each names the condition a new value must meet; breaking it rejects the value.
    """

    DST_BLANK = "dst-blank"
    """The new value has no destination broker."""
    DST_NONBLANK = "dst-nonblank"
    """The new value names a destination broker."""
    SRC_BLANK = "src-blank"
    """The new value has no source broker."""
    SRC_NONBLANK = "src-nonblank"
    """The new value names a source broker."""
    SRC_IS_PREV_DST = "src-is-prev-dst"
    """The new source is the previous destination (the current owner)."""
    DST_NOT_PREV_DST = "dst-not-prev-dst"
    """The new destination is not the previous destination (no transfer to oneself)."""
    SAME_DST = "same-dst"
    """The destination is unchanged."""
    SAME_SRC = "same-src"
    """The source is unchanged."""

    __hash__ = object.__hash__

    def __str__(self) -> str:
        return self.value


class GapPolicy(enum.Enum):
    """What a store does with a version jump of two or more."""

    ACCEPT = "accept"
    REJECT = "reject"


_Strict = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TransitionSpec(BaseModel):
    """One edge of the table: valid on the listed storages, part of the listed flows."""

    model_config = _Strict

    src: str = Field(alias="from")
    dst: str = Field(alias="to")
    storages: tuple[StorageType, ...] | None = None
    flows: tuple[str, ...] = ()
    checks: tuple[BrokerCheck, ...] = ()
    unreached: str = ""
    """Why the bench's bounds never take this edge (the coverage guard then does not ask for it)."""


class OverrideSpec(BaseModel):
    """An edge only a forced record takes (the leader's ``overrideOwnership``)."""

    model_config = _Strict

    src: str = Field(alias="from")
    dst: str = Field(alias="to")
    flows: tuple[str, ...] = ()
    unreached: str = ""
    """Why the bench's bounds never take this override (as on a table edge)."""


class FlowSpec(BaseModel):
    """A named flow and the state paths it walks."""

    model_config = _Strict

    name: str
    summary: str = ""
    forced: bool = False
    paths: tuple[tuple[str, ...], ...]


class ResolverSpec(BaseModel):
    """The resolver's version rules for this model (the table and checks come from the edges)."""

    model_config = _Strict

    versioned: bool = True
    force: bool = True
    version_gap: dict[StorageType, GapPolicy] = Field(default_factory=dict)
    first_write_version: dict[StorageType, int] = Field(default_factory=dict)


class ModelSpec(BaseModel):
    """The validated contents of one model file."""

    model_config = _Strict

    name: str
    description: str = ""
    source: str = ""
    states: tuple[str, ...]
    initial: str
    in_flight: tuple[str, ...]
    active: tuple[str, ...]
    stable: tuple[str, ...]
    terminal: tuple[str, ...] = ()
    semi_terminal: tuple[str, ...] = ()
    storages: tuple[StorageType, ...] = (StorageType.SystemTopic,)
    resolver: ResolverSpec | None = None
    transitions: tuple[TransitionSpec, ...]
    overrides: tuple[OverrideSpec, ...] = ()
    flows: tuple[FlowSpec, ...] = ()
    variant_of: str | None = None
    bug: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        known = set(self.states)
        if len(known) != len(self.states):
            raise ValueError("states: a state is listed twice")

        def need(where: str, names: Iterable[str]) -> None:
            for name in names:
                if name not in known:
                    raise ValueError(f"{where}: unknown state {name!r} (states are {list(self.states)})")

        need("initial", [self.initial])
        for group in ("in_flight", "active", "stable", "terminal", "semi_terminal"):
            need(group, getattr(self, group))
        flow_names = [flow.name for flow in self.flows]
        if len(set(flow_names)) != len(flow_names):
            raise ValueError("flows: a flow name is declared twice")
        seen: set[tuple[str, str, StorageType]] = set()
        for i, edge in enumerate(self.transitions):
            where = f"transitions[{i}] ({edge.src} -> {edge.dst})"
            need(where, [edge.src, edge.dst])
            if edge.src == edge.dst:
                raise ValueError(f"{where}: a state cannot transition to itself in the table")
            for storage in edge.storages or self.storages:
                if storage not in self.storages:
                    raise ValueError(f"{where}: storage {storage.value} is not one of the model's storages")
                if (edge.src, edge.dst, storage) in seen:
                    raise ValueError(f"{where}: declared twice for {storage.value}")
                seen.add((edge.src, edge.dst, storage))
            for tag in edge.flows:
                if tag not in flow_names:
                    raise ValueError(f"{where}: flow {tag!r} is not declared under [[flows]]")
        for i, override in enumerate(self.overrides):
            where = f"overrides[{i}] ({override.src} -> {override.dst})"
            need(where, [override.src, override.dst])
            for tag in override.flows:
                if tag not in flow_names:
                    raise ValueError(f"{where}: flow {tag!r} is not declared under [[flows]]")
        for flow in self.flows:
            for j, path in enumerate(flow.paths):
                need(f"flows.{flow.name}.paths[{j}]", path)
                if len(path) < 2:
                    raise ValueError(f"flows.{flow.name}.paths[{j}]: a path needs at least two states")
        if self.resolver is not None:
            foreign = [s for s in self.states if s not in ServiceUnitState.__members__]
            if foreign:
                raise ValueError(
                    f"resolver: states {foreign} are not ServiceUnitState members; a model with "
                    "other states can only be graph-only (omit [resolver])"
                )
            for storage in self.resolver.version_gap:
                if storage not in self.storages:
                    raise ValueError(f"resolver.version_gap: {storage.value} is not one of the model's storages")
            for storage in self.storages:
                if self.resolver.versioned and storage not in self.resolver.version_gap:
                    raise ValueError(f"resolver.version_gap: missing a policy for {storage.value}")
        return self


@dataclass(frozen=True)
class StorageRules:
    """One storage type's compiled rules: the resolver reads only this."""

    storage: StorageType
    edges: Mapping[tuple[ServiceUnitState, ServiceUnitState], tuple[BrokerCheck, ...]]
    versioned: bool
    force: bool
    gap_accepted: bool
    first_write_version: int | None


class ProtocolModel:
    """A loaded, validated model with everything derived from its table.

    States are enum members: ``ServiceUnitState`` when the model uses Pulsar's seven names,
    otherwise an enum made for the model (e.g. the PIP-192 design's ``Assigned``).
    """

    def __init__(self, spec: ModelSpec, origin: str) -> None:
        self.spec = spec
        self.origin = origin
        if all(name in ServiceUnitState.__members__ for name in spec.states):
            self.State: type[enum.Enum] = ServiceUnitState
            self.states: tuple[enum.Enum, ...] = tuple(ServiceUnitState[s] for s in spec.states)
        else:
            self.State = enum.Enum(  # type: ignore[misc]
                f"{spec.name.title().replace('-', '').replace('.', '')}State",
                {s: s for s in spec.states},
            )
            self.states = tuple(self.State[s] for s in spec.states)
        state = self.State.__getitem__
        self.initial = state(spec.initial)
        self.in_flight = frozenset(state(s) for s in spec.in_flight)
        self.active = frozenset(state(s) for s in spec.active)
        self.stable = frozenset(state(s) for s in spec.stable)
        self.terminal = frozenset(state(s) for s in spec.terminal)
        self.semi_terminal = frozenset(state(s) for s in spec.semi_terminal)
        self.storages = spec.storages
        self._edges: dict[StorageType, dict[tuple[enum.Enum, enum.Enum], TransitionSpec]] = {
            storage: {} for storage in spec.storages
        }
        for edge in spec.transitions:
            for storage in edge.storages or spec.storages:
                self._edges[storage][(state(edge.src), state(edge.dst))] = edge
        self.overrides: tuple[tuple[enum.Enum, enum.Enum], ...] = tuple(
            (state(o.src), state(o.dst)) for o in spec.overrides
        )
        self._rules: dict[StorageType, StorageRules] = {}
        if spec.resolver is not None:
            for storage in spec.storages:
                self._rules[storage] = StorageRules(
                    storage=storage,
                    edges={
                        (ServiceUnitState[a.value], ServiceUnitState[b.value]): spec.checks
                        for (a, b), spec in self._edges[storage].items()
                    },
                    versioned=spec.resolver.versioned,
                    force=spec.resolver.force,
                    gap_accepted=spec.resolver.version_gap.get(storage) is GapPolicy.ACCEPT,
                    first_write_version=spec.resolver.first_write_version.get(storage),
                )

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"ProtocolModel({self.name!r}, from {self.origin})"

    def state(self, value: enum.Enum | str) -> enum.Enum:
        """This model's member for a state given by name or by any enum with the same name."""
        name = value.name if isinstance(value, enum.Enum) else value
        try:
            return self.State[name]
        except KeyError:
            raise ValueError(
                f"model {self.name} has no state {name!r}; its states are {list(self.spec.states)}"
            ) from None

    def _storage(self, storage: StorageType) -> StorageType:
        if storage not in self._edges:
            raise ValueError(
                f"model {self.name} has no {storage.value} table; its storages are {[s.value for s in self.storages]}"
            )
        return storage

    def edges(
        self, storage: StorageType = StorageType.SystemTopic
    ) -> dict[tuple[enum.Enum, enum.Enum], TransitionSpec]:
        """The table for one storage: (from, to) -> the declared edge."""
        return dict(self._edges[self._storage(storage)])

    def is_valid_transition(
        self, src: enum.Enum | str, dst: enum.Enum | str, storage: StorageType = StorageType.SystemTopic
    ) -> bool:
        return (self.state(src), self.state(dst)) in self._edges[self._storage(storage)]

    def is_in_flight(self, state: enum.Enum | str) -> bool:
        return self.state(state) in self.in_flight

    def is_active(self, state: enum.Enum | str) -> bool:
        return self.state(state) in self.active

    @property
    def has_resolver(self) -> bool:
        return bool(self._rules)

    def rules(self, storage: StorageType = StorageType.SystemTopic) -> StorageRules:
        """The compiled resolver rules for one storage."""
        if not self._rules:
            raise ValueError(f"model {self.name} is graph-only: it declares no [resolver]")
        return self._rules[self._storage(storage)]

    def unreached(self, storage: StorageType) -> dict[tuple[str, str], str]:
        """The edges of one storage's table and the overrides that the model says the bench never
        takes, each with the reason (see :mod:`statechan.vacuity`)."""
        found = {
            (e.src, e.dst): e.unreached
            for e in self.spec.transitions
            if e.unreached and storage in (e.storages or self.storages)
        }
        found.update({(o.src, o.dst): o.unreached for o in self.spec.overrides if o.unreached})
        return found

    def flow(self, name: str) -> FlowSpec:
        for flow in self.spec.flows:
            if flow.name == name:
                return flow
        raise ValueError(f"model {self.name} has no flow {name!r}; flows: {[f.name for f in self.spec.flows]}")


def _builtin_dirs() -> list[Traversable]:
    """Where the built-in model files are: ``statechan/models`` in a wheel, or in a zip shipped
    to Spark's executors (read through ``importlib.resources``, so no file system path is
    needed); ``models/`` at the top of a checkout."""
    packaged = resources.files("statechan") / "models"
    checkout = Path(__file__).resolve().parent.parent / "models"
    return [d for d in (packaged, checkout) if d.is_dir()]


def builtin_data_file(*parts: str) -> Traversable:
    """A data file shipped beside the built-in models (``models/scenarios/…``), from a wheel or
    a checkout; ``ModelError`` naming it if there is none."""
    for directory in _builtin_dirs():
        entry = directory.joinpath(*parts)
        if entry.is_file():
            return entry
    raise ModelError(f"no built-in data file models/{'/'.join(parts)}")


def builtin_model_files() -> dict[str, Traversable]:
    """Each built-in model's file by model name (a wheel's before a checkout's)."""
    found: dict[str, Traversable] = {}
    for directory in _builtin_dirs():
        for entry in sorted(directory.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".toml"):
                found.setdefault(entry.name.removesuffix(".toml"), entry)
    return found


def builtin_model_names() -> list[str]:
    """The names of the models shipped with the library."""
    return sorted(builtin_model_files())


def _format_error(origin: str, error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        loc = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"{origin}: {loc}: {item['msg']}")
    return "\n".join(lines)


def _edge_storages(edge: dict[str, Any], model_storages: list[str]) -> list[str]:
    return list(edge.get("storages") or model_storages)


def _apply_variant(data: dict[str, Any], origin: str, depth: int = 0) -> dict[str, Any]:
    """Merge a variant file (``variant_of = "<built-in>"``) over its base model's data.

    A variant may replace top-level keys, merge ``[resolver]`` keys, add ``[[transitions]]`` and
    ``[[overrides]]``, and remove edges (``[[drop_transitions]]`` with ``from``, ``to`` and
    optional ``storages``) and flows (``drop_flows``).
    """
    base_name = data["variant_of"]
    base_path = builtin_model_files().get(str(base_name))
    if base_path is None or depth > 4:
        raise ModelError(f"{origin}: variant_of: no built-in model {base_name!r} to derive from")
    base = tomllib.loads(base_path.read_text(encoding="utf-8"))
    if "variant_of" in base:
        base = _apply_variant(base, str(base_path), depth + 1)
    merged = copy.deepcopy(base)
    storages = list(merged.get("storages", ["SystemTopic"]))
    for key, value in data.items():
        if key in ("drop_transitions", "drop_flows", "transitions", "overrides"):
            continue
        if key == "resolver" and isinstance(value, dict):
            resolver = merged.setdefault("resolver", {})
            for rkey, rvalue in value.items():
                if isinstance(rvalue, dict) and isinstance(resolver.get(rkey), dict):
                    resolver[rkey] = {**resolver[rkey], **rvalue}
                else:
                    resolver[rkey] = rvalue
        else:
            merged[key] = value
    for i, drop in enumerate(data.get("drop_transitions", [])):
        if not isinstance(drop, dict) or "from" not in drop or "to" not in drop:
            raise ModelError(f"{origin}: drop_transitions[{i}]: needs 'from' and 'to'")
        gone = set(drop.get("storages") or storages)
        found = False
        kept = []
        for edge in merged.get("transitions", []):
            if edge.get("from") == drop["from"] and edge.get("to") == drop["to"]:
                found = True
                left = [s for s in _edge_storages(edge, storages) if s not in gone]
                if left:
                    kept.append({**edge, "storages": left})
            else:
                kept.append(edge)
        if not found:
            raise ModelError(f"{origin}: drop_transitions[{i}]: {drop['from']} -> {drop['to']} is not in {base_name}")
        merged["transitions"] = kept
    dropped_flows = set(data.get("drop_flows", []))
    if dropped_flows:
        merged["flows"] = [f for f in merged.get("flows", []) if f.get("name") not in dropped_flows]
        for edge in merged.get("transitions", []) + merged.get("overrides", []):
            edge["flows"] = [f for f in edge.get("flows", []) if f not in dropped_flows]
    merged["transitions"] = merged.get("transitions", []) + list(data.get("transitions", []))
    merged["overrides"] = merged.get("overrides", []) + list(data.get("overrides", []))
    return merged


def parse_model(text: str, origin: str = "<string>") -> ProtocolModel:
    """Validate a model given as TOML text; ``origin`` names it in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelError(f"{origin}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ModelError(f"{origin}: not a model: nested deeper than the TOML parser's recursion limit") from None
    if "variant_of" in data:
        try:
            data = _apply_variant(data, origin)
        except (TypeError, AttributeError, KeyError) as exc:  # a key of the wrong TOML type
            raise ModelError(
                f"{origin}: not a variant: {type(exc).__name__}: {exc} (storages, drop_flows are lists of names; "
                "drop_transitions, transitions, overrides lists of tables)"
            ) from None
    try:
        spec = ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise ModelError(_format_error(origin, exc)) from None
    return ProtocolModel(spec, origin)


def read_text_file(path: str | Path, what: str) -> str:
    """The UTF-8 text of a regular file, or ``ValueError`` naming it and ``what`` it was to be: a
    FIFO or a device would block or never end, and bytes that are not UTF-8 are no text."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():
            raise ValueError(f"{path}: not a {what} (not a regular file)")
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the {what}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a {what}: byte {exc.start} is not UTF-8") from None


def load_model_file(path: str | Path) -> ProtocolModel:
    """Load a model from a file path."""
    try:
        text = read_text_file(path, "model file")
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    return parse_model(text, str(path))


@functools.cache
def _load_builtin(name: str) -> ProtocolModel:
    path = builtin_model_files().get(name)
    if path is not None:
        return parse_model(path.read_text(encoding="utf-8"), str(path))
    raise ModelError(f"no built-in model {name!r}; built-in models: {', '.join(builtin_model_names())}")


def load_model(model: str | Path | ProtocolModel | None = None) -> ProtocolModel:
    """A model by built-in name, by file path, or passed through; ``None`` is the default model."""
    if isinstance(model, ProtocolModel):
        return model
    if model is None:
        return _load_builtin(DEFAULT_MODEL)
    if isinstance(model, Path) or str(model).endswith(".toml"):
        return _load_file_once(model)
    return _load_builtin(str(model))


_FILES: dict[str, tuple[bytes, ProtocolModel]] = {}
"""Model files loaded, by path, with the bytes they were read from: the invariants look a cluster's
model up at every observation, and a mutant's model is a file. Keyed by content, not modification
time: two mutants written to one path within the clock's resolution, at the same size, differ."""


def model_file_bytes(model: str | Path) -> bytes | None:
    """The bytes of the model file ``model`` names (None for a built-in model's name or a file
    that cannot be read): what a cache of anything made from the model must be keyed by."""
    if not (isinstance(model, Path) or str(model).endswith(".toml")):
        return None
    try:
        with open(model, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _load_file_once(path: str | Path) -> ProtocolModel:
    data = model_file_bytes(path)
    if data is None:
        return load_model_file(path)  # reports the file that cannot be read
    known = _FILES.get(str(path))
    if known is not None and known[0] == data:
        return known[1]
    model = load_model_file(path)
    _FILES[str(path)] = (data, model)
    return model
