"""Every command's --help, as it read before the commands' options were shared from one place
(abtest/cli/options.py): tests/fixtures/cli_help.json was written by that code, at a fixed
terminal width and without colour. Sharing a definition must change no word of any help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PINNED = Path(__file__).resolve().parents[2] / "fixtures" / "cli_help.json"
COMMANDS = [
    [],
    *[[c] for c in ("batch", "gates", "plan", "report", "history", "analyze", "regress")],
    *[[c] for c in ("bisect", "lab", "node", "runs")],
    *[["lab", c] for c in ("up", "status", "kubelets", "down")],
    *[["node", c] for c in ("check", "show", "apply", "restore")],
    *[["runs", c] for c in ("show", "export", "import")],
    ["kubelets"],
    *[["kubelets", c] for c in ("build", "list", "remove")],
]
# one interpreter for all of them (a start-up each would cost the fast tier seconds)
PROBE = (
    "import contextlib, io, json, sys\n"
    "from abtest.cli.main import main\n"
    "out = {}\n"
    "for argv in json.loads(sys.argv[1]):\n"
    "    sys.argv, text = ['abtest', *argv, '--help'], io.StringIO()\n"
    "    with contextlib.redirect_stdout(text):\n"
    "        try:\n"
    "            main()\n"
    "        except SystemExit:\n"
    "            pass\n"
    "    out[' '.join(argv)] = text.getvalue()\n"
    "print(json.dumps(out, indent=1, sort_keys=True))\n"
)


def helps() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TERMINAL_WIDTH")}
    env.update(COLUMNS="100", LINES="50", NO_COLOR="1", TERM="dumb")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(COMMANDS)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout))


def test_every_help_is_as_pinned() -> None:
    pinned = json.loads(PINNED.read_text())
    now = helps()
    assert sorted(now) == sorted(pinned)
    for command, text in pinned.items():
        assert now[command] == text, f"abtest {command} --help changed"


if __name__ == "__main__":  # python tests/unit/cli/test_help_pinned.py > the fixture
    print(json.dumps(helps(), indent=1, sort_keys=True))
