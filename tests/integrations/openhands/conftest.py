"""The OpenHands tests run in .venv-openhands (Python >= 3.12, ./dev.sh): the SDK offline."""

import os

# litellm fetches a model price map from the network at import: keep its bundled copy
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
