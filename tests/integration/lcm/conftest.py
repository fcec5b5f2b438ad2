"""LCM integration fixtures: the fake LLM server as a real process."""

from fakes.fixtures import fake_llm  # noqa: F401  (re-exported fixture)
