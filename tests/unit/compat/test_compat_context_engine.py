"""The context-engine adapter: the installed Hermes 0.19.0 passes, other shapes are refused.

Contract tests run against the installed Hermes (its real ABC, plugin manager and plugin
context); the refusals point the adapter at fake module objects and other version strings,
as another Hermes would present them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import pytest

from hermes_runtime.compat import (
    TESTED_VERSION,
    HermesIncompatible,
    check_hooks,
    check_registration,
    engine_base,
    installed_version,
)


def test_the_installed_hermes_is_the_tested_one() -> None:
    assert installed_version() == TESTED_VERSION


def test_the_installed_abc_is_the_one_lcm_subclasses() -> None:
    import agent.context_engine

    from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine

    assert engine_base() is agent.context_engine.ContextEngine
    assert issubclass(LcmContextEngine, agent.context_engine.ContextEngine)


def test_registration_through_hermes_own_plugin_context(tmp_path: Path) -> None:
    """Hermes 0.19.0's PluginManager and PluginContext take the engine and both hooks."""
    from hermes_cli.plugins import PluginContext, PluginManager, PluginManifest

    from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine, register

    manager = PluginManager()
    register(PluginContext(PluginManifest(name="lcm"), manager))
    assert isinstance(manager._context_engine, LcmContextEngine)
    assert {"post_llm_call", "on_session_finalize"} <= set(manager._hooks)
    assert check_hooks(["post_llm_call", "on_session_finalize"]) == []


def fake_abc_module(*, extra_abstract: bool = False, compress_args: str = "full") -> Any:
    """A stand-in for another Hermes' ``agent.context_engine``."""
    module = types.ModuleType("agent.context_engine")

    class ContextEngine(ABC):
        @property
        @abstractmethod
        def name(self) -> str: ...

        if compress_args == "full":

            @abstractmethod
            def compress(
                self,
                messages: Any,
                current_tokens: Any = None,
                focus_topic: Any = None,
                force: bool = False,
                memory_context: str = "",
            ) -> Any: ...

        else:

            @abstractmethod
            def compress(self, messages: Any, budget: int = 0) -> Any: ...

        if extra_abstract:

            @abstractmethod
            def select_context(self, request_messages: Any) -> Any: ...

    module.ContextEngine = ContextEngine  # type: ignore[attr-defined]
    return module


def test_an_abc_with_an_abstract_method_lcm_lacks_is_refused() -> None:
    with pytest.raises(HermesIncompatible) as raised:
        engine_base(fake_abc_module(extra_abstract=True), "0.19.0")
    message = str(raised.value)
    assert "Hermes 0.19.0" in message and "agent.context_engine.ContextEngine" in message
    assert "select_context" in message


def test_a_changed_compress_signature_is_refused() -> None:
    with pytest.raises(HermesIncompatible, match=r"compress\(.*'budget'"):
        engine_base(fake_abc_module(compress_args="budget"), "0.19.0")


def test_a_module_without_the_abc_is_refused() -> None:
    with pytest.raises(HermesIncompatible, match="has no ContextEngine class"):
        engine_base(types.ModuleType("agent.context_engine"), "0.19.0")


def test_an_unknown_release_is_refused_even_with_the_same_shape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import agent.context_engine

    with pytest.raises(HermesIncompatible, match=r"Hermes 0\.24\.0: .*>=0\.19\.0,<0\.24"):
        engine_base(agent.context_engine, "0.24.0")
    (event,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert event["event"] == "hermes.compat.refused" and event["hermes_version"] == "0.24.0"


def test_a_plugin_context_without_register_context_engine_is_refused() -> None:
    class OldContext:
        def register_hook(self, name: str, callback: Any) -> None: ...

    with pytest.raises(HermesIncompatible, match="no register_context_engine"):
        check_registration(OldContext(), "0.19.0")


def test_a_hook_the_host_does_not_list_is_degraded(capsys: pytest.CaptureFixture[str]) -> None:
    plugins = types.ModuleType("hermes_cli.plugins")
    plugins.VALID_HOOKS = {"on_session_finalize"}  # type: ignore[attr-defined]
    assert check_hooks(["post_llm_call", "on_session_finalize"], plugins, "0.19.0") == [
        "post_llm_call"
    ]
    (event,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert event["event"] == "hermes.compat.degraded"
    assert "post_llm_call" in event["internal"] and "never fires" in event["problem"]


# Another Hermes whose ABC has an abstract method LCM lacks, ahead of the real one on the path.
FAKE_ABC = """
from abc import ABC, abstractmethod

class ContextEngine(ABC):
    @abstractmethod
    def compress(self, messages, current_tokens=None, focus_topic=None, force=False,
                 memory_context=""): ...

    @abstractmethod
    def route(self, messages): ...
"""


def test_loading_the_plugin_on_another_abc_fails_naming_it(tmp_path: Path) -> None:
    """What Hermes' plugin loader meets: the import of the plugin module raises, with a
    message naming the version and the internal (old code: the plugin imported, and the
    engine failed later with a bare TypeError when instantiated)."""
    fake = tmp_path / "agent"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "context_engine.py").write_text(textwrap.dedent(FAKE_ABC))
    child = subprocess.run(
        [sys.executable, "-c", "import hermes_runtime.lcm.host.hermes_plugin"],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode != 0
    last = child.stderr.strip().splitlines()[-1]
    assert last.startswith("hermes_runtime.compat.version.HermesIncompatible: Hermes 0.19.0: ")
    assert "agent.context_engine.ContextEngine" in last and "route" in last
