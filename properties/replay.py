"""Moved to :mod:`statechan.invariants.replay` (the catalogue is part of the library now); this name
is kept only while the last importers move over."""

from statechan.invariants.replay import *  # noqa: F403
