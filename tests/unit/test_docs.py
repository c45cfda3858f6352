"""The user's documents stay true to the tool: every `abtest ...` command they show names a real
subcommand with real options, every relative link resolves (file and heading), every test file
they cite exists, and the README's test command is the one CI runs. Parses the CLI; no lab."""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer

from abtest.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        ROOT / "gates" / "README.md",
        *ROOT.glob("docs/**/*.md"),
    ]
)
IDS = [str(p.relative_to(ROOT)) for p in DOCS]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")
# `abtest` as a command, not the package (`abtest.x`, `abtest[history]`) or a path (`abtest/`)
COMMAND = re.compile(r"(?:^|[\s(/])abtest((?:[ \t]+[^\s&;#]+)*)")
OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")


def code_of(text: str) -> list[str]:
    """The code in a Markdown text: each fenced block's logical lines (a trailing backslash
    joins the next line), and each inline code span (a span may wrap over lines)."""
    pieces: list[str] = []
    for block in FENCE.findall(text):
        pieces += block.replace("\\\n", " ").splitlines()
    prose = FENCE.sub("", text)
    pieces += [span.replace("\n", " ") for span in SPAN.findall(prose)]
    return pieces


@cache
def root_command() -> Any:
    return typer.main.get_command(app)


def options_of(command: Any) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(param.opts)
        names.update(param.secondary_opts)
    return names


def resolve(words: list[str]) -> tuple[Any, list[str], str]:
    """The command `abtest WORDS...` runs, the words after it, and its name; a word that is no
    subcommand of a group fails with what the group has."""
    command: Any = root_command()
    name = "abtest"
    rest = list(words)
    while rest and hasattr(command, "commands"):
        word = rest[0]
        if word.startswith("-") or not re.fullmatch(r"[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*", word):
            break  # an option, a placeholder (RUN_ID, NAME...), or `...`
        alternatives = word.split("|")
        found = [command.commands.get(alt) for alt in alternatives]
        missing = [alt for alt, sub in zip(alternatives, found, strict=True) if sub is None]
        known = ", ".join(sorted(command.commands))
        assert not missing, f"`{name} {word}`: no subcommand {missing} (it has: {known})"
        rest.pop(0)
        if len(found) > 1:  # `node check|show`: each alternative must take the options shown
            common = set.intersection(*(options_of(sub) for sub in found))
            return _Alternatives(common), rest, f"{name} {word}"
        command, name = found[0], f"{name} {word}"
    return command, rest, name


class _Alternatives:
    def __init__(self, options: set[str]) -> None:
        self.opts = options
        self.params: list[Any] = []


def check_line(line: str) -> list[str]:
    """What is wrong with each `abtest ...` invocation in one line of code."""
    problems: list[str] = []
    for match in COMMAND.finditer(line):
        # the invocation ends at a shell separator or a comment; ` / ` joins two in a listing
        words = re.split(r"\s+[/|]\s+|\s*(?:&&|\|\||;|\s#)\s*", match.group(1).strip())[0].split()
        try:
            command, rest, name = resolve(words)
        except AssertionError as exc:
            problems.append(f"{line.strip()!r}: {exc}")
            continue
        known = command.opts if isinstance(command, _Alternatives) else options_of(command)
        for word in rest:
            for option in OPTION.findall(word.lstrip("[")):
                long_or_short = option.startswith("--") or re.fullmatch(r"-[a-zA-Z]", option)
                if long_or_short and option not in known:
                    problems.append(f"{line.strip()!r}: `{name}` has no option {option}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_abtest_command_shown_is_real(doc: Path) -> None:
    problems = [p for line in code_of(doc.read_text()) for p in check_line(line)]
    assert not problems, "\n".join(problems)


def test_the_check_catches_a_wrong_subcommand_and_a_wrong_option() -> None:
    assert check_line("abtest gates --all --playbook lab-sweep") == []
    assert check_line("abtest node check|show --profile P") == []
    assert check_line("abtest runs export [RUN]... -o FILE / runs import FILE") == []
    assert check_line("sudo abtest lab up --nodes 2 && abtest lab status --json") == []
    assert "no subcommand" in check_line("abtest lab start")[0]
    assert "no subcommand" in check_line("abtest node check|frobnicate --profile P")[0]
    assert "has no option --frobnicate" in check_line("abtest report RUN --frobnicate")[0]
    assert "has no option --set" in check_line("abtest node show|apply --profile P --set X=1")[0]
    assert check_line("import abtest; abtest.open_results(path)") == []
    assert check_line("abtest runs --json | jq -r .x") == []


def test_the_docs_show_commands_to_check() -> None:
    readme = (ROOT / "README.md").read_text()
    shown = [m for line in code_of(readme) for m in COMMAND.finditer(line)]
    assert len(shown) >= 30


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    kept = "".join(c for c in text if c in " -" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", doc.read_text()), re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_relative_link_resolves(doc: Path) -> None:
    broken: list[str] = []
    for target in LINK.findall(FENCE.sub("", doc.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert not broken, "\n".join(broken)


def test_the_slugs_are_githubs() -> None:
    assert slug("Savings in seconds (B \u2212 T) and where that interval is weaker") == (
        "savings-in-seconds-b--t-and-where-that-interval-is-weaker"
    )
    assert slug("Kubelet builds as arms (`abtest lab kubelets`)") == (
        "kubelet-builds-as-arms-abtest-lab-kubelets"
    )


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_every_test_file_cited_exists(doc: Path) -> None:
    """A promise names the test that measures it: that test must be there to measure it."""
    cited = set(re.findall(r"\btests/[\w/.-]+\.py\b", doc.read_text()))
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert not missing, f"{doc.name} cites tests that do not exist: {missing}"


def test_the_readme_test_command_is_what_ci_runs() -> None:
    ci = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    test_command = ci[-1]
    assert test_command == "scripts/test"
    readme = (ROOT / "README.md").read_text()
    commands = [
        line.split("#")[0].strip()
        for block in re.findall(r"```sh\n(.*?)```", readme, re.S)
        for line in block.splitlines()
    ]
    assert test_command in commands


def test_the_readme_is_a_short_guide() -> None:
    assert len((ROOT / "README.md").read_text()) <= 12_000
