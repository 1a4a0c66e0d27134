"""The invariant catalogue and the Hypothesis bench (see docs/ for the generated catalogue)."""
