"""Moved to :mod:`statechan.invariants.violation` (the catalogue is part of the library now); this name
is kept only while the last importers move over."""

from statechan.invariants.violation import *  # noqa: F403
