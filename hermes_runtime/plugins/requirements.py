"""A plugin's ``requirements.txt``, checked as untrusted input before pip sees any of it.

A plugin's repository is written by whoever can push to it, so its requirements file may
name only exact releases, each with the hashes of the files pip may install:
``name[extras]==version [; marker] --hash=sha256:<hex> ...``. Everything else pip would
accept is refused, because each of it lets the file choose what is installed or from where:
options lines (``-r``, ``-c``, ``-e``, ``-f``, ``--index-url``, ``--extra-index-url``, ...),
options after a requirement other than ``--hash``, direct URLs and paths, and any version
rule but ``==`` (``>=`` lets the index pick, ``==1.*`` and ``===`` too). The requirement
itself is parsed with ``packaging`` (PEP 508), the same grammar pip uses. pip is then given
``render()``'s text, not the file: it reads only what was checked (no ``${VAR}`` expansion,
no line pip would read differently).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

HASH_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
HEX_DIGITS = frozenset("0123456789abcdef")


class RequirementsProblem(Exception):
    """Why a requirements file is refused; ``package`` names the requirement, when one."""

    def __init__(self, message: str, package: str | None = None) -> None:
        super().__init__(message)
        self.package = package


@dataclass(frozen=True)
class PinnedRequirement:
    """One checked requirement: exactly one release, and the hashes its files may have."""

    name: str  # canonical (PEP 503): what pip and the index call it
    requirement: Requirement
    hashes: tuple[str, ...]
    line: int

    @property
    def version(self) -> str:
        return next(iter(self.requirement.specifier)).version

    def render(self) -> str:
        hashes = " ".join(f"--hash={digest}" for digest in self.hashes)
        return f"{self.requirement} {hashes}"


def parse_requirements(text: str, source: str) -> list[PinnedRequirement]:
    """Check every requirement of ``text``; raise ``RequirementsProblem`` at the first fault.

    ``source`` names the file in messages (``<file> line N: ...``).
    """
    pinned: list[PinnedRequirement] = []
    seen: dict[str, int] = {}
    for line, content in logical_lines(text):
        requirement = _parse_line(content, f"{source} line {line}", line)
        if requirement.name in seen:
            raise RequirementsProblem(
                f"{source} line {line}: {requirement.name} is already required on line "
                f"{seen[requirement.name]} (one pinned release per package)",
                requirement.name,
            )
        seen[requirement.name] = line
        pinned.append(requirement)
    return pinned


def render(requirements: list[PinnedRequirement]) -> str:
    """The file pip reads: the checked requirements only, one per line."""
    return "".join(f"{requirement.render()}\n" for requirement in requirements)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, content) of each non-empty line, comments removed and lines ending
    in a backslash joined to the next, as pip reads a requirements file."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        stripped = _strip_comment(raw)
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        content = " ".join(part.strip() for part in [*pending, stripped]).strip()
        pending = []
        if content:
            lines.append((start, content))
    if pending:
        content = " ".join(part.strip() for part in pending).strip()
        if content:
            lines.append((start, content))
    return lines


def _strip_comment(raw: str) -> str:
    """pip's rule: ``#`` starts a comment at the start of a line or after whitespace."""
    for index, char in enumerate(raw):
        if char == "#" and (index == 0 or raw[index - 1].isspace()):
            return raw[:index].rstrip()
    return raw.rstrip()


def _parse_line(content: str, where: str, line: int) -> PinnedRequirement:
    tokens = content.split()
    if tokens[0].startswith("-"):
        raise RequirementsProblem(
            f"{where}: option {tokens[0].split('=', 1)[0]!r} is refused: a plugin's "
            "requirements file holds only pinned requirements with their hashes (the index "
            "is the operator's setting)"
        )
    first_option = next((i for i, token in enumerate(tokens) if token.startswith("-")), None)
    spec_text = " ".join(tokens[:first_option])
    options = tokens[first_option:] if first_option is not None else []
    requirement = _requirement(spec_text, where)
    name = canonicalize_name(requirement.name)
    _check_pinned(requirement, name, where)
    hashes = _hashes(options, name, where)
    return PinnedRequirement(name, requirement, hashes, line)


def _requirement(spec_text: str, where: str) -> Requirement:
    try:
        requirement = Requirement(spec_text)
    except InvalidRequirement as exc:
        raise RequirementsProblem(f"{where}: not a requirement ({exc})") from None
    if requirement.url:
        raise RequirementsProblem(
            f"{where}: {requirement.name} @ {requirement.url}: direct URLs and paths are "
            "refused (packages come from the operator's index)",
            canonicalize_name(requirement.name),
        )
    return requirement


def _check_pinned(requirement: Requirement, name: str, where: str) -> None:
    specifiers = list(requirement.specifier)
    exact = (
        len(specifiers) == 1
        and specifiers[0].operator == "=="
        and not specifiers[0].version.endswith(".*")
    )
    if not exact:
        given = str(requirement.specifier) or "no version"
        raise RequirementsProblem(
            f"{where}: {name} must be pinned to one release with '==' (got {given})", name
        )


def _hashes(options: list[str], name: str, where: str) -> tuple[str, ...]:
    hashes: list[str] = []
    index = 0
    while index < len(options):
        option, _, value = options[index].partition("=")
        if option != "--hash":
            raise RequirementsProblem(
                f"{where}: {name}: option {option!r} is refused (only --hash may follow a "
                "requirement)",
                name,
            )
        if not value:  # `--hash sha256:...`, as pip's option parser also reads it
            index += 1
            value = options[index] if index < len(options) else ""
        hashes.append(_checked_hash(value, name, where))
        index += 1
    if not hashes:
        raise RequirementsProblem(
            f"{where}: {name} has no --hash: every requirement needs the hashes of the files "
            "pip may install (pip-compile --generate-hashes writes them)",
            name,
        )
    return tuple(hashes)


def _checked_hash(value: str, name: str, where: str) -> str:
    algorithm, _, digest = value.partition(":")
    expected = HASH_HEX_LENGTHS.get(algorithm)
    if expected is None:
        raise RequirementsProblem(
            f"{where}: {name}: --hash={value!r}: the algorithm must be one of "
            f"{', '.join(HASH_HEX_LENGTHS)}",
            name,
        )
    if len(digest) != expected or not set(digest) <= HEX_DIGITS:
        raise RequirementsProblem(
            f"{where}: {name}: --hash={value!r}: expected {expected} lowercase hex digits "
            f"after '{algorithm}:'",
            name,
        )
    return f"{algorithm}:{digest}"
