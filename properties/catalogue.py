"""Moved to :mod:`statechan.invariants.catalogue` (the catalogue is part of the library now); this name
is kept only while the last importers move over."""

from statechan.invariants.catalogue import *  # noqa: F403
