"""The names the daemon reports digests under: one list for STATUS, the metrics and the replay.

* ``METHODS``: how a proposal's replacement was made (``model``: the digest shows lines only the
  model's ranking chose, or a checked gist of the model; ``deterministic``; ``masking``: old tool
  outputs became placeholders; ``headtail``: the head and tail of the region, the cheapest digest,
  for a degraded agent).
* ``SKIP_REASONS``: why a proposal of a daemon with a model is not the model's.
* ``LEVELS``: an agent's compaction strategy under load (watcher.serve.degrade), best first.
"""

from __future__ import annotations

from typing import Final

METHODS: Final = ("model", "deterministic", "masking", "headtail")
SKIP_REASONS: Final = (
    "deadline",  # its digest would come too late (the model's measured cost, the agent's pace)
    "late",  # the model was cut off: the context reached its high watermark before its digest
    "degraded",  # the agent is degraded under load
    "busy",  # the model lane was taken, or too many agents waited
    "too_small",  # nothing for the model to rank (every section shown whole) or gist
    "not_shown",  # the model ranked lines, but the digest shows none the rules would not
    "rejected",  # the gist failed its check or did not pay
    "model_failed",  # the model failed or is in back-off
    "no_model",
    "policy",  # the agent's planner does not digest (the masking baseline)
)
LEVELS: Final = ("normal", "deterministic", "masking", "headtail")
