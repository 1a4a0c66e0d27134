"""Test-wide set-up: the Hypothesis profile (``HYPOTHESIS_PROFILE``, default ``ci``)."""

from properties import profiles

profiles.load()
