"""file_sha256 on real files: the node's script run here with subprocess, as on a node."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from abtest.node.connection import Result
from abtest.node.file_digest import DigestMemo, file_sha256

calls: list[list[str]] = []


def run(argv: list[str]) -> Result:
    calls.append(argv)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return Result(" ".join(argv), proc.returncode, proc.stdout, proc.stderr)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_unchanged_file_is_hashed_once_and_its_digest_reused(tmp_path: Path) -> None:
    f = tmp_path / "kubelet"
    f.write_bytes(b"a" * 4096)
    memo = DigestMemo()
    first = file_sha256(run, str(f), memo, racy_s=0)
    again = file_sha256(run, str(f), memo, racy_s=0)
    assert first == again == _sha(f)
    assert (memo.hashed, memo.reused) == (1, 1)


def test_a_file_renamed_over_with_the_same_size_and_mtime_is_hashed_again(tmp_path: Path) -> None:
    f, other = tmp_path / "kubelet", tmp_path / "candidate"
    f.write_bytes(b"a" * 4096)
    other.write_bytes(b"b" * 4096)
    st = f.stat()
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    memo = DigestMemo()
    assert file_sha256(run, str(f), memo, racy_s=0) == hashlib.sha256(b"a" * 4096).hexdigest()
    other.rename(f)  # a swap: a new inode under the same name
    assert file_sha256(run, str(f), memo, racy_s=0) == hashlib.sha256(b"b" * 4096).hexdigest()
    assert (memo.hashed, memo.reused) == (2, 0)


def test_a_write_in_place_that_keeps_size_and_mtime_is_hashed_again(tmp_path: Path) -> None:
    f = tmp_path / "kubelet"
    f.write_bytes(b"a" * 4096)
    st = f.stat()
    memo = DigestMemo()
    file_sha256(run, str(f), memo, racy_s=0)
    with f.open("r+b") as fh:
        fh.write(b"z")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # the change time still moves
    assert file_sha256(run, str(f), memo, racy_s=0) == _sha(f)
    assert memo.reused == 0


def test_a_file_changed_just_now_is_not_remembered(tmp_path: Path) -> None:
    # within RACY_S of its change a write in the same timestamp tick could go unseen
    f = tmp_path / "kubelet"
    f.write_bytes(b"a" * 4096)
    memo = DigestMemo()
    file_sha256(run, str(f), memo)
    file_sha256(run, str(f), memo)
    assert (memo.hashed, memo.reused) == (2, 0)
    assert str(f) not in memo.known


def test_a_missing_file_is_none_and_forgotten(tmp_path: Path) -> None:
    f = tmp_path / "kubelet"
    f.write_bytes(b"a")
    memo = DigestMemo()
    file_sha256(run, str(f), memo, racy_s=0)
    f.unlink()
    assert file_sha256(run, str(f), memo, racy_s=0) is None
    assert str(f) not in memo.known


def test_a_node_whose_stat_cannot_say_the_identity_gets_a_plain_hash(tmp_path: Path) -> None:
    f = tmp_path / "kubelet"
    f.write_bytes(b"a" * 10)

    def no_stat(argv: list[str]) -> Result:
        if argv[0] == "sh":
            return Result("sh", 1, "", "stat: unrecognized option '-c'")
        return run(argv)

    memo = DigestMemo()
    assert file_sha256(no_stat, str(f), memo, racy_s=0) == _sha(f)
    assert file_sha256(no_stat, str(f), memo, racy_s=0) == _sha(f)
    assert (memo.hashed, memo.reused) == (2, 0)


def test_a_path_is_an_argument_never_part_of_the_script(tmp_path: Path) -> None:
    f = tmp_path / "a b; touch pwned"
    f.write_bytes(b"x")
    calls.clear()
    assert file_sha256(run, str(f), DigestMemo(), racy_s=0) == _sha(f)
    assert calls[0][:2] == ["sh", "-c"] and calls[0][4] == str(f)
    assert not (tmp_path / "pwned").exists()
