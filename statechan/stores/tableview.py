"""The two channel table views (Pulsar's ``ServiceUnitStateTableView``): one over the system
topic, one over the metadata store. Both keep a local map of bundle -> value and call listeners;
they differ in *where* the conflict resolver decides (section 6.2 of the reference):

- system topic: ``put`` always publishes; every reader's view applies the resolver on read;
- metadata store: ``put`` runs the resolver at write time inside a compare-and-set; a refused
  put completes without error, as in Pulsar, but here its :class:`PutResult` says so.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

import pydantic

from statechan.model import ProtocolModel
from statechan.resolver import Reason, Verdict, decide, offer, rules_for
from statechan.states import ServiceUnitState, StorageType
from statechan.stores.metadata import (
    BadVersionError,
    MetadataClient,
    NodeExistsError,
    NoNodeError,
    Notification,
    SessionEvent,
    SessionExpiredError,
)
from statechan.stores.topic import MalformedValueError, Message, Topic
from statechan.values import ServiceUnitStateData

PATH_PREFIX = "/service_unit_state"
_SERVICE_UNIT_PATH = re.compile(r"^/service_unit_state/.*/0x[0-9a-fA-F]{8}_0x[0-9a-fA-F]{8}$")

Listener = Callable[[str, ServiceUnitStateData | None], None]
"""Called with (service unit, value); ``None`` is a deletion."""
RecordListener = Callable[[Message, Verdict], None]
"""Called with every record a topic view reads and the resolver's verdict on it (for traces)."""


class ViewClosedError(RuntimeError):
    """The table view was closed."""


def path_of(key: str) -> str:
    """The metadata-store path of a service unit: ``/service_unit_state/<key>``."""
    return f"{PATH_PREFIX}/{key}"


def key_of(path: str) -> str | None:
    """The service unit a metadata path holds, or ``None`` if the path is not a channel node."""
    if _SERVICE_UNIT_PATH.match(path) is None:
        return None
    return path[len(PATH_PREFIX) + 1 :]


def owned_by(value: ServiceUnitStateData, broker: str) -> bool:
    """Pulsar's owned-set rule: Owned with dst == broker, or Splitting with src == broker."""
    state = value.state
    return (state is ServiceUnitState.Owned and value.dst_broker == broker) or (
        state is ServiceUnitState.Splitting and value.source_broker == broker
    )


@dataclass(frozen=True)
class PutResult:
    """What a put or delete did.

    ``applied``: ``True``/``False`` when the store decided at write time (metadata store);
    ``None`` on the system topic, where each reader decides later. ``verdict`` is the resolver's
    when it ran; ``message`` the published message (system topic); ``error`` a store failure.
    """

    applied: bool | None
    verdict: Verdict | None = None
    message: Message | None = None
    error: str | None = None


@dataclass
class ViewStats:
    """Counters a view keeps (Pulsar logs these; we count them)."""

    accepted: Counter[Reason] = field(default_factory=Counter)
    rejected: Counter[Reason] = field(default_factory=Counter)
    malformed: int = 0
    errors: list[str] = field(default_factory=list)
    equal_updates_skipped: int = 0
    puts_refused: int = 0
    put_conflicts: int = 0


class TableView(Protocol):
    """The interface both views share (Pulsar's ``ServiceUnitStateTableView``)."""

    broker: str
    storage: StorageType
    stats: ViewStats

    def start(
        self,
        tail: Listener | None = None,
        existing: Listener | None = None,
        outdated: Listener | None = None,
        record: RecordListener | None = None,
    ) -> None: ...

    def attach(
        self,
        tail: Listener | None = None,
        existing: Listener | None = None,
        outdated: Listener | None = None,
        record: RecordListener | None = None,
    ) -> None: ...

    def get(self, key: str) -> ServiceUnitStateData | None: ...

    def put(self, key: str, value: ServiceUnitStateData) -> PutResult: ...

    def delete(self, key: str) -> PutResult: ...

    def items(self) -> list[tuple[str, ServiceUnitStateData]]: ...

    def snapshot(self) -> dict[str, ServiceUnitStateData]: ...

    def data(self) -> Mapping[str, ServiceUnitStateData]: ...

    def owned_service_units(self, broker: str | None = None) -> set[str]: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    @property
    def is_metadata_store_based(self) -> bool: ...


class _ViewBase:
    """What both views share: the local map, listeners, counters, the owned set."""

    storage: StorageType

    def __init__(self, broker: str, model: str | Path | ProtocolModel | None, check_brokers: bool) -> None:
        self.broker = broker
        self.check_brokers = check_brokers
        self._rules = rules_for(self.storage, model)
        self._data: dict[str, ServiceUnitStateData] = {}
        self._owned: set[str] = set()  # keys this view's own broker owns, kept as the map changes
        self._tail: list[Listener] = []
        self._existing: list[Listener] = []
        self._outdated: list[Listener] = []
        self.stats = ViewStats()
        self.started = False
        self.closed = False

    def _register(self, tail: Listener | None, existing: Listener | None, outdated: Listener | None) -> None:
        if self.closed:
            raise ViewClosedError(f"{self!r} is closed")
        for listeners, listener in ((self._tail, tail), (self._existing, existing), (self._outdated, outdated)):
            if listener is not None:
                listeners.append(listener)

    def _check_open(self) -> None:
        if self.closed:
            raise ViewClosedError(f"{self!r} is closed")

    def attach(
        self,
        tail: Listener | None = None,
        existing: Listener | None = None,
        outdated: Listener | None = None,
        record: RecordListener | None = None,
    ) -> None:
        """Register the listeners without loading anything (a restored view holds its items)."""
        self._register(tail, existing, outdated)
        self._listen(record)

    def start(
        self,
        tail: Listener | None = None,
        existing: Listener | None = None,
        outdated: Listener | None = None,
        record: RecordListener | None = None,
    ) -> None:
        """Register the listeners, load what the channel holds now, and tell the existing listeners."""
        self.attach(tail, existing, outdated, record)
        self._load()

    def _listen(self, record: RecordListener | None) -> None:
        raise NotImplementedError

    def _load(self) -> None:
        raise NotImplementedError

    def get(self, key: str) -> ServiceUnitStateData | None:
        return self._data.get(key)

    def _set(self, key: str, value: ServiceUnitStateData | None) -> None:
        """The one place the local map changes (keeps the owned set in step)."""
        if value is None:
            self._data.pop(key, None)
            self._owned.discard(key)
            return
        self._data[key] = value
        if owned_by(value, self.broker):
            self._owned.add(key)
        else:
            self._owned.discard(key)

    def _replace_all(self, data: dict[str, ServiceUnitStateData]) -> None:
        self._data = data
        self._owned = {key for key, value in data.items() if owned_by(value, self.broker)}

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def items(self) -> list[tuple[str, ServiceUnitStateData]]:
        return list(self._data.items())

    def snapshot(self) -> dict[str, ServiceUnitStateData]:
        """A copy of the local map (for comparing views)."""
        return dict(self._data)

    def data(self) -> Mapping[str, ServiceUnitStateData]:
        """The local map itself, read-only (no copy: valid until the view next changes)."""
        return MappingProxyType(self._data)

    def owned_service_units(self, broker: str | None = None) -> set[str]:
        """Bundles this view says ``broker`` (default: the view's own broker) owns."""
        if broker is None or broker == self.broker:
            return set(self._owned)
        return {key for key, value in self._data.items() if owned_by(value, broker)}

    def _notify(self, listeners: list[Listener], key: str, value: ServiceUnitStateData | None) -> None:
        for listener in list(listeners):
            listener(key, value)

    def close(self) -> None:
        self.closed = True

    @property
    def is_metadata_store_based(self) -> bool:
        return self.storage is StorageType.MetadataStore


class SystemTopicTableView(_ViewBase):
    """One broker's view of the channel topic (Pulsar's ``ServiceUnitStateTableViewImpl``).

    The view moves only when told: :meth:`advance` reads the next message and applies the
    resolver. A malformed message is counted, its message id recorded, and skipped.
    """

    storage = StorageType.SystemTopic

    def __init__(
        self,
        topic: Topic,
        broker: str,
        model: str | Path | ProtocolModel | None = None,
        check_brokers: bool = True,
    ) -> None:
        super().__init__(broker, model, check_brokers)
        self.topic = topic
        self.reader = topic.reader(f"{broker}/tableview", read_compacted=True)
        self._records: list[RecordListener] = []

    def __repr__(self) -> str:
        return (
            f"SystemTopicTableView({self.broker!r}, {len(self._data)} keys, at {self.reader.position}/{self.topic.end})"
        )

    def on_record(self, listener: RecordListener) -> None:
        """Also call ``listener(message, verdict)`` for every message read (for traces)."""
        self._records.append(listener)

    def _listen(self, record: RecordListener | None) -> None:
        if record is not None:
            self._records.append(record)

    def _load(self) -> None:
        """Read to the current end of the log, then call the existing listeners for each entry."""
        end = self.topic.end
        while self.reader.position < end:
            self._apply_next(notify=False)
        self.started = True
        for key, value in list(self._data.items()):
            self._notify(self._existing, key, value)

    @property
    def pending(self) -> int:
        """Log offsets this view has not passed yet; 0 when there is nothing left to read (a
        reader behind the compaction horizon may skip the rest)."""
        return self.reader.lag if self.reader.has_next() else 0

    def advance(self, count: int = 1) -> int:
        """Read up to ``count`` messages; returns how many were read."""
        self._check_open()
        read = 0
        while read < count and self._apply_next(notify=True):
            read += 1
        return read

    def catch_up(self) -> int:
        """Read to the end of the log."""
        return self.advance(self.reader.lag)

    def _apply_next(self, notify: bool) -> bool:
        message = self.reader.read_next()
        if message is None:
            return False
        try:
            value = message.value()
        except MalformedValueError as exc:
            self.stats.malformed += 1
            self.stats.errors.append(str(exc))
            return True
        key = message.key
        after, verdict = offer(self._rules, self._data.get(key), value, self.check_brokers)
        if verdict.accepted:
            self.stats.accepted[verdict.reason] += 1
            self._set(key, after)
            if notify:
                self._notify(self._tail, key, value)
        else:
            self.stats.rejected[verdict.reason] += 1
        for record_listener in self._records:
            record_listener(message, verdict)
        return True

    def put(self, key: str, value: ServiceUnitStateData | None) -> PutResult:
        """Publish ``value``; it never fails and never checks (readers decide)."""
        self._check_open()
        return PutResult(None, message=self.topic.publish(key, value, producer=self.broker))

    def delete(self, key: str) -> PutResult:
        """Publish a tombstone."""
        return self.put(key, None)

    def flush(self) -> None:
        """Producer flush plus table-view refresh: read to the end of the log."""
        self.catch_up()


@dataclass
class PendingPut:
    """A metadata-store put between its read and its compare-and-set (so writers can race)."""

    view: MetadataStoreTableView
    key: str
    value: ServiceUnitStateData
    read_version: int | None
    verdict: Verdict
    result: PutResult | None = None
    """Set by :meth:`commit`: what the write did (a split waits on its children's)."""

    def commit(self) -> PutResult:
        self.result = self.view._commit(self)
        return self.result


class MetadataStoreTableView(_ViewBase):
    """One broker's view over the metadata store (``ServiceUnitStateMetadataStoreTableViewImpl``).

    ``retry_bad_version_without_recheck`` re-introduces #24186: on a lost compare-and-set the
    write is retried at the new node version without running the resolver again.
    """

    storage = StorageType.MetadataStore

    def __init__(
        self,
        client: MetadataClient,
        broker: str,
        model: str | Path | ProtocolModel | None = None,
        check_brokers: bool = True,
        retry_bad_version_without_recheck: bool = False,
    ) -> None:
        super().__init__(broker, model, check_brokers)
        self.client = client
        self.retry_bad_version_without_recheck = retry_bad_version_without_recheck

    def __repr__(self) -> str:
        return f"MetadataStoreTableView({self.broker!r}, {len(self._data)} keys, {self.client!r})"

    def _listen(self, record: RecordListener | None) -> None:
        """Listen to the store (``record`` is the topic view's; a store view reads no records)."""
        self.client.add_listener(self._on_notification)
        self.client.add_session_listener(self._on_session_event)

    def _load(self) -> None:
        """Load every node under ``/service_unit_state``, call the existing listeners."""
        self._fill()
        self.started = True

    def _fill(self) -> None:
        loaded: dict[str, ServiceUnitStateData] = {}
        stack = [PATH_PREFIX]
        while stack:
            path = stack.pop()
            for child in self.client.children(path):
                stack.append(f"{path}/{child}")
            key = key_of(path)
            if key is not None:
                value = self._read(key)
                if value is not None:
                    loaded[key] = value
        self._replace_all(dict(sorted(loaded.items())))
        for key, value in list(self._data.items()):
            self._notify(self._existing, key, value)

    def _read(self, key: str) -> ServiceUnitStateData | None:
        node = self.client.get(path_of(key))
        if node is None:
            return None
        try:
            return ServiceUnitStateData.model_validate_json(node[0])
        except pydantic.ValidationError as exc:
            self.stats.malformed += 1
            self.stats.errors.append(f"{path_of(key)} (version {node[1].version}): {exc.errors()[0]['msg']}")
            return None

    def _update(self, key: str, value: ServiceUnitStateData | None) -> None:
        """MTV ``updateData``: an equal value changes nothing and calls nobody."""
        if self._data.get(key) == value:
            self.stats.equal_updates_skipped += 1
            return
        self._set(key, value)
        self._notify(self._tail, key, value)

    def _refresh(self, key: str) -> None:
        try:
            self._update(key, self._read(key))
        except SessionExpiredError as exc:
            self.stats.errors.append(str(exc))

    def _on_notification(self, notification: Notification) -> None:
        key = key_of(notification.path)
        if key is not None and not self.closed:
            self._refresh(key)

    def _on_session_event(self, event: SessionEvent) -> None:
        if self.closed:
            return
        if event is SessionEvent.SessionLost:
            for key, value in list(self._data.items()):
                self._notify(self._outdated, key, value)
            self._replace_all({})
        elif event is SessionEvent.SessionReestablished:
            try:
                self._fill()
            except SessionExpiredError as exc:
                self.stats.errors.append(str(exc))

    def prepare_put(self, key: str, value: ServiceUnitStateData) -> PendingPut:
        """The read half of ``readModifyUpdateOrCreate``: read the node, run the resolver."""
        self._check_open()
        if value is None:
            raise ValueError("a metadata-store put needs a value (Pulsar's put is @NonNull); use delete()")
        node = self.client.get(path_of(key))
        prev = None
        read_version = None
        if node is not None:
            read_version = node[1].version
            try:
                prev = ServiceUnitStateData.model_validate_json(node[0])
            except pydantic.ValidationError:
                prev = None  # an unreadable node is overwritten only by a first write
        verdict = decide(self._rules, prev, value, self.check_brokers)
        return PendingPut(self, key, value, read_version, verdict)

    def _commit(self, pending: PendingPut) -> PutResult:
        if pending.verdict.rejected:
            self.stats.puts_refused += 1
            return PutResult(False, pending.verdict)
        path = path_of(pending.key)
        data = pending.value.to_json().encode()
        try:
            self.client.put(path, data, -1 if pending.read_version is None else pending.read_version)
        except (BadVersionError, NodeExistsError, NoNodeError) as exc:
            if not self.retry_bad_version_without_recheck:
                self.stats.put_conflicts += 1
                return PutResult(False, pending.verdict, error=f"conflict: {type(exc).__name__}")
            self.client.put(path, data, None)
        except SessionExpiredError as exc:
            return PutResult(False, pending.verdict, error=str(exc))
        self._refresh(pending.key)
        return PutResult(True, pending.verdict)

    def put(self, key: str, value: ServiceUnitStateData) -> PutResult:
        """Resolver-checked compare-and-set; a refused or conflicting put reports ``applied=False``."""
        try:
            pending = self.prepare_put(key, value)
        except SessionExpiredError as exc:
            return PutResult(False, error=str(exc))
        return pending.commit()

    def delete(self, key: str) -> PutResult:
        """Delete the node (no resolver); a missing node is not an error."""
        self._check_open()
        try:
            self.client.delete(path_of(key))
        except NoNodeError:
            pass
        except SessionExpiredError as exc:
            return PutResult(False, error=str(exc))
        self._refresh(key)
        return PutResult(True)

    def flush(self) -> None:
        """A no-op on the metadata store."""
