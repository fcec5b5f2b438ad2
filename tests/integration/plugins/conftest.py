"""Fixtures for the plugin bootstrapper's integration tests (helpers in plugins_testlib)."""

from plugins_testlib import data_dir, make_repo, synced_plugin

__all__ = ["data_dir", "make_repo", "synced_plugin"]
