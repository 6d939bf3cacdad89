"""A recorded trajectory played forever, for the benches whose agents run longer than it lasts."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

from ipc.sections import Section
from watcher.eval.trajectories import Trajectory


def looped_turns(prefix: str, traj: Trajectory) -> Iterator[list[Section]]:
    """The trajectory's turns forever (turn 0, the prompt and task, once), with section ids and
    groups unique to ``prefix`` and the loop: an agent that never runs out of turns."""
    for loop in itertools.count():
        for i, turn in enumerate(traj.turns):
            if loop and i == 0:
                continue
            yield [
                replace(s, id=f"{prefix}.{loop}.{s.id}", group=f"{loop}.{s.group}" if s.group else "")
                for s in turn
            ]
