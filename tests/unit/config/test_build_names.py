"""A build name is parsed once (abtest.config.build_names): every form it accepts, what it
gives back as its name, each refusal's one line, and where a build lives on a node."""

from __future__ import annotations

from pathlib import Path

import pytest

from abtest.config.build_names import (
    BuildName,
    NodePath,
    binary_of_level,
    build_binary,
    build_folder,
    parse_build_name,
    series_root,
)
from abtest.config.releases import Release
from abtest.errors import UserError

R = Release(1, 36, 3)


@pytest.mark.parametrize(
    ("text", "want", "name"),
    [
        ("v1.36.3", BuildName(R), "v1.36.3"),
        ("1.36.3", BuildName(R), "v1.36.3"),  # upstream's tag is the name
        ("v1.36.3+agc", BuildName(R, "agc", series_root() / "agc"), "v1.36.3+agc"),
        ("v1.36.3+agc.p2", BuildName(R, "agc", series_root() / "agc", 2), "v1.36.3+agc.p2"),
        (
            "v1.36.3+bisect-demo.p12",
            BuildName(R, "bisect-demo", series_root() / "bisect-demo", 12),
            "v1.36.3+bisect-demo.p12",
        ),
        ("v1.36.3+mine", BuildName(R, "mine"), "v1.36.3+mine"),  # placed under that name
    ],
)
def test_every_accepted_name_parses_to_one_value_whose_str_is_the_name(
    text: str, want: BuildName, name: str
) -> None:
    got = parse_build_name(text, "--good", paths=False)
    assert got == want
    assert str(got) == got.name == name
    assert parse_build_name(str(got), "again", paths=False) == got  # the name round-trips


def test_a_series_folder_is_a_build_named_after_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "my-series"
    got = parse_build_name(f"v1.36.3+{folder}", "--bad")
    assert got == BuildName(R, "my-series", folder.resolve())
    assert str(got) == "v1.36.3+my-series"


@pytest.mark.parametrize(
    ("text", "paths", "line"),
    [
        (
            "latest",
            True,
            "--good: 'latest' is neither a kubelet release nor a release+series (name a "
            "release (v1.36.3) or a release and a patch series (v1.36.3+agc, or "
            "v1.36.3+./my-series for a series folder))",
        ),
        (
            "v1.36",
            False,
            "--good: 'v1.36' is neither a kubelet release nor a release+series (name a "
            "release (v1.36.3) or a release and a patch series (v1.36.3+agc))",
        ),
        (
            "v1.33.0",
            False,
            "--good: v1.33.0 is older than the lab supports (choose v1.34.0 or newer, e.g. "
            "v1.34.4 (the reference's minor))",
        ),
        (
            "v1.36.3+AGC",
            False,
            "--good: 'v1.36.3+AGC': 'AGC' is not a series name (a series name is 1-40 "
            "lower-case letters, digits, '.' and '-', starting and ending with a letter or "
            "digit)",
        ),
        (
            "v1.36.3+./agc",
            False,
            "--good: 'v1.36.3+./agc': a series folder cannot be named here (place the build "
            "with `abtest lab kubelets RELEASE+./FOLDER`, then name it RELEASE+FOLDERNAME)",
        ),
        (
            "v1.36.3+/tmp/agc.p2",
            True,
            "--good: 'v1.36.3+/tmp/agc.p2': a series folder's name may not end in .pN "
            "(rename the folder: RELEASE+NAME.pN names the first N patches of series NAME)",
        ),
        (
            "v1.36.3\n",
            False,
            "--good: 'v1.36.3\\n' is neither a kubelet release nor a release+series (name a "
            "release (v1.36.3) or a release and a patch series (v1.36.3+agc))",
        ),
    ],
)
def test_each_refusal_is_one_line_naming_the_option(text: str, paths: bool, line: str) -> None:
    with pytest.raises(UserError) as refused:
        parse_build_name(text, "--good", paths=paths)
    assert refused.value.lines() == [line]


def test_a_build_lives_in_its_named_folder_under_builds_dir() -> None:
    build = parse_build_name("v1.36.3+agc.p2", "x", paths=False)
    assert build_folder("/var/lib/builds", build) == "/var/lib/builds/v1.36.3+agc.p2"
    assert build_folder("/var/lib/builds/", build) == "/var/lib/builds/v1.36.3+agc.p2"
    assert build_binary("/opt/b", BuildName(R)) == "/opt/b/v1.36.3/kubelet"


def test_a_node_path_is_its_path_and_never_a_build() -> None:
    path = NodePath("/opt/kubelet")
    assert str(path) == "/opt/kubelet" and not isinstance(path, BuildName)


def test_a_checked_level_is_read_back_as_a_path_or_a_build() -> None:
    assert binary_of_level("/opt/kubelet", "x") == NodePath("/opt/kubelet")
    assert binary_of_level("v1.36.3+agc", "x") == parse_build_name("v1.36.3+agc", "x")
