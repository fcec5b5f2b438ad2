"""The GitHub workflows users run (.github/workflows) pass actionlint, and the release is a
supply chain a user can check.

They cannot run on the project's own machines (no GitHub there), so a static check is what
keeps them honest: syntax, expressions, job dependencies, and shellcheck-free `run:` blocks;
every action pinned by commit SHA; a release only from a version tag, in the protected
`release` environment; docs/release.md verifying signatures against that exact workflow.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
ACTIONLINT = REPO_ROOT / ".cache" / "tools" / "bin" / "actionlint"
WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.y*ml"))
RELEASE = REPO_ROOT / ".github" / "workflows" / "release.yaml"
RELEASE_DOC = REPO_ROOT / "docs" / "release.md"
TAG_ONLY = "startsWith(github.ref, 'refs/tags/v')"


def _load(path: Path) -> dict[str, Any]:
    workflow: dict[Any, Any] = yaml.safe_load(path.read_text())
    if True in workflow:  # YAML 1.1 reads the key `on` as a boolean
        workflow["on"] = workflow.pop(True)
    return workflow


def _uses(workflow: dict[str, Any]) -> list[str]:
    refs = []
    for job in workflow["jobs"].values():
        refs += [job["uses"]] if "uses" in job else []
        refs += [step["uses"] for step in job.get("steps", []) if "uses" in step]
    return refs


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


def test_every_action_is_pinned_by_a_commit_sha() -> None:
    """A tag can be moved to other code by whoever controls the action's repository; a commit
    SHA cannot. The tag stays in a comment for the reader (and for update tools)."""
    for path in WORKFLOWS:
        refs = _uses(_load(path))
        assert refs, f"{path.name} uses no action"
        for ref in refs:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref), f"{path.name}: {ref}"
        for line in path.read_text().splitlines():
            if re.match(r"\s*(- )?uses: ", line):
                assert re.search(r"@[0-9a-f]{40} # v\d+(\.\d+)*$", line), f"{path.name}: {line}"


def test_the_release_runs_only_on_a_version_tag() -> None:
    """No workflow_dispatch (or any other trigger): a branch cannot push or sign a release."""
    triggers = _load(RELEASE)["on"]
    assert set(triggers) == {"push"}, triggers
    assert set(triggers["push"]) == {"tags"}, triggers["push"]
    assert all(tag.startswith("v") for tag in triggers["push"]["tags"])


def test_release_jobs_that_push_or_sign_run_on_tags_in_the_release_environment() -> None:
    jobs = _load(RELEASE)["jobs"]
    publishing = {
        name: job
        for name, job in jobs.items()
        if {"packages", "id-token"} & set(job.get("permissions", {}))
    }
    assert set(publishing) == {"image", "image-on-upstream", "chart"}, set(publishing)
    for name, job in publishing.items():
        assert job.get("environment") == "release", name
        assert job.get("if") == TAG_ONLY, name
        assert job["permissions"].get("id-token") == "write", name
    assert "inputs" not in RELEASE.read_text() and "dry-run" not in RELEASE.read_text()


def test_release_docs_verify_the_exact_release_workflow_identity() -> None:
    """The identity must name this repository's release workflow at a tag: a regexp such as
    `https://github.com/OWNER/.+` accepts a signature from any workflow of any repository of
    the owner."""
    commands = "\n".join(re.findall(r"```console\n(.*?)```", RELEASE_DOC.read_text(), re.DOTALL))
    assert commands.count("cosign verify") >= 2, f"{RELEASE_DOC.name}: no cosign verify commands"
    identity = re.findall(r"--certificate-identity[ =](\S+)", commands)
    assert len(identity) == commands.count("cosign verify"), identity
    for value in identity:
        assert re.fullmatch(
            r"https://github\.com/[\w.$-]+/[\w.$-]+/\.github/workflows/release\.yaml"
            r"@refs/tags/v[\w.$-]+",
            value.strip("'\""),
        ), value
    issuer = "--certificate-oidc-issuer https://token.actions.githubusercontent.com"
    assert commands.count(issuer) == len(identity)
    for text in (commands, RELEASE.read_text()):
        assert "certificate-identity-regexp" not in text


def test_ci_builds_images_from_the_dockerfiles_pinned_base() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    default = re.search(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.MULTILINE)
    assert default and "@sha256:" in default[1]
    assert _load(REPO_ROOT / ".github" / "workflows" / "ci.yaml")["env"]["BASE_IMAGE"] == default[1]
