"""learned.jsonl: what a run learned of each record, read back by a resume; a cache that a
crash, a garbled line or another version leaves short, never wrong."""

from __future__ import annotations

import base64
import json
import zlib

import numpy as np

from tune_orchestrator.rundir.learned import Learned, LearnedFile


def entries(n: int, *, start: int = 0) -> list[tuple[str, Learned]]:
    """n entries; every third without features (a build that failed); a negative key."""
    rng = np.random.default_rng(start)
    return [
        (
            f"d{start + i}",
            Learned(
                -(2**63) + i if i == 1 else 2**64 - 1 - i,
                f"task{i % 2}",
                None if i % 3 == 2 else rng.random((1 + i % 4, 7)).astype(np.float32),
            ),
        )
        for i in range(n)
    ]


def same(found: dict[str, Learned], expected: list[tuple[str, Learned]]) -> None:
    assert list(found) == [digest for digest, _ in expected]
    for digest, entry in expected:
        assert (found[digest].key, found[digest].task) == (entry.key, entry.task)
        if entry.features is None:
            assert found[digest].features is None
        else:
            np.testing.assert_array_equal(found[digest].features, entry.features)


def test_what_is_appended_round_by_round_reads_back_exactly(tmp_path):
    file = LearnedFile(tmp_path / "learned.jsonl", "tag", 7)
    assert file.read() == {}  # no file yet: nothing known
    first, second = entries(5), entries(4, start=5)
    file.append(first)
    file.append([])
    file.append(second)
    same(file.read(), first + second)


def test_a_torn_or_garbled_line_is_absent_and_the_next_round_still_reads(tmp_path):
    path = tmp_path / "learned.jsonl"
    file = LearnedFile(path, "tag", 7)
    first = entries(3)
    file.append(first)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 40])  # a crash tore the last line
    later = entries(2, start=3)
    file.append(later)  # begins on a line of its own
    same(file.read(), first[:2] + later)
    with open(path, "ab") as fh:
        fh.write(
            b'{"tag":"tag","digest":"x","key":"zz","task":"t"}\n\xff\xfe not json\n{"tag":"tag"}\n'
        )
    same(file.read(), first[:2] + later)


def test_lines_written_for_another_tag_are_not_read(tmp_path):
    path = tmp_path / "learned.jsonl"
    LearnedFile(path, "old tvm", 7).append(entries(3))
    now = LearnedFile(path, "new tvm", 7)
    assert now.read() == {}
    fresh = entries(2, start=7)
    now.append(fresh)
    same(now.read(), fresh)


def test_a_line_whose_features_are_not_this_tvms_width_is_absent(tmp_path):
    """The file is input: a line may claim the tag and hold features of another width (or
    none), which the predictor could not stack with the others."""
    path = tmp_path / "learned.jsonl"
    good = entries(1)
    LearnedFile(path, "tag", 7).append(good)
    narrow = Learned(3, "task0", np.ones((7, 5), np.float32))  # 35 floats: 5 rows of 7 too
    LearnedFile(path, "tag", 5).append([("five wide", narrow)])
    with open(path, "ab") as fh:  # claims seven wide, holds ten floats; holds none at all
        for floats in (10, 0, 7 * ((1 << 20) // 7 + 1)):  # and one that unpacks to over 4 MiB
            packed = base64.b64encode(zlib.compress(np.ones(floats, np.float32).tobytes()))
            line = {"tag": "tag", "digest": f"f{floats}", "key": "1", "task": "t", "width": 7}
            fh.write(json.dumps({**line, "features": packed.decode()}).encode() + b"\n")
    same(LearnedFile(path, "tag", 7).read(), good)
