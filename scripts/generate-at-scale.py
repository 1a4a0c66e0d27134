#!/usr/bin/env python3
"""Time one generation of a Parquet trace at scale and print its figures as JSON:
``scripts/generate-at-scale.py PATH RECORDS [WORKERS] [SEED]`` (workers default 2, seed 1).
Run it under ``/usr/bin/time -v`` for the whole process tree's CPU time."""

from __future__ import annotations

import dataclasses
import json
import sys


def main() -> None:
    from statechan.tracegen import timed_generation

    path, records = sys.argv[1], int(sys.argv[2])
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    run = timed_generation(path, records, seed=seed, workers=workers)
    print(json.dumps(dataclasses.asdict(run) | {"per_record_us": round(run.per_record_us, 3)}))


if __name__ == "__main__":  # the workers are spawned: they import this file without running it
    main()
