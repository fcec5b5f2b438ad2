"""Fixtures for the plugin bootstrapper's integration tests (helpers in plugins_testlib)."""

from fakes.fixtures import fake_llm
from plugins_testlib import data_dir, make_repo, synced_plugin

__all__ = ["data_dir", "fake_llm", "make_repo", "synced_plugin"]
