"""The GitHub workflows users run (.github/workflows) pass actionlint.

They cannot run on the project's own machines (no GitHub there), so a static check is what
keeps them honest: syntax, expressions, job dependencies, and shellcheck-free `run:` blocks.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ACTIONLINT = REPO_ROOT / ".cache" / "tools" / "bin" / "actionlint"
WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.y*ml"))


def test_workflows_exist() -> None:
    names = {path.name for path in WORKFLOWS}
    assert {"ci.yaml", "release.yaml"} <= names, names


def test_actionlint_accepts_every_workflow() -> None:
    assert ACTIONLINT.is_file(), f"{ACTIONLINT} missing: run ci/install-actionlint.sh (make tools)"
    result = subprocess.run(
        [str(ACTIONLINT), "-no-color", *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_rejects_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    needs: [missing]\n"
        "    steps:\n      - run: echo ${{ github.nope }}\n"
    )
    result = subprocess.run(
        [str(ACTIONLINT), "-no-color", str(broken)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1, result.stdout
    assert "missing" in result.stdout
