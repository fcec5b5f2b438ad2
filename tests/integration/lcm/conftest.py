"""LCM integration fixtures: the fake LLM server as a real process."""

import sys
from pathlib import Path

from fakes.fixtures import fake_llm  # noqa: F401  (re-exported fixture)

# the conversation builders and lossless check live with the unit tests
sys.path.insert(0, str(Path(__file__).parents[2] / "unit" / "lcm"))
