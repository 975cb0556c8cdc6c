"""Small copies of the shared real data for tests whose checks do not need its sizes.

Training tests of the music application spend most of their time on the lengths of
the chorales (the ladder is unrolled over the steps of a window, and ``nll_per_step``
runs whole chorales eagerly, up to 129 steps for the first chorales): the real
chorales cut short keep real notes and unequal lengths (padding) at a fraction of it.
The SST copy keeps the first lines of every tree file: a run with ``--limit N`` reads
the same first examples from it as from the full files (which it parses entirely).
"""

import json
import pathlib

from tests.conftest import shared_path

CHORALES = shared_path("data", "jsb_chorales", "jsb_chorales.json")
SST = shared_path("data", "sst")

# steps kept of the first chorales of every split: unequal lengths, several of them odd,
# so that whole chorales are padded to the longest and the last windows of several are
SHORT_LENGTHS = {"train": (16, 11, 13, 9), "valid": (10, 7, 12, 9), "test": (9, 12, 6, 11)}


def write_short_chorales(folder, lengths=SHORT_LENGTHS):
    """Writes ``folder/jsb_chorales.json``: the first real chorales of every split cut
    to ``lengths`` steps; returns its path."""
    chorales = json.loads(pathlib.Path(CHORALES).read_text())
    short = {split: [c[:n] for c, n in zip(chorales[split], lengths[split])] for split in lengths}
    for split, cut in short.items():  # every chorale is cut: the copy is smaller than the data
        assert [len(c) for c in cut] == list(lengths[split]), (split, [len(c) for c in cut])
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "jsb_chorales.json"
    path.write_text(json.dumps(short))
    return path


def write_sst_prefix(folder, lines=300):
    """Writes the first ``lines`` trees of every SST tree file to ``folder``; returns it."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        with open(pathlib.Path(SST) / f"{split}.txt", encoding="utf-8") as f:
            head = [line for _, line in zip(range(lines), f)]
        (folder / f"{split}.txt").write_text("".join(head), encoding="utf-8")
    return folder


def check_another_sst_test_file(evaluate, run, first, elsewhere, capsys):
    """Checks ``evaluate`` (a function of a folder of SST tree files that scores a model of
    ``run`` on its test sentences) of a run trained on the files of ``first``: once
    ``first/test.txt`` holds other sentences (its trees reversed) it is refused in one
    line, and once that folder is moved to ``elsewhere`` (another folder given: the user's
    choice) it is scored, with a note on stderr. Leaves the folder in ``elsewhere``."""
    import os
    import re

    import pytest

    from applications.errors import InputError

    lines = (first / "test.txt").read_text().splitlines(keepends=True)
    (first / "test.txt").write_text("".join(lines[::-1]))  # other test sentences first
    with pytest.raises(InputError, match=re.escape(
            f"the model in {run} was trained and tested on SST tree files in {first}; {first} now holds other data "
            "(SST tree files, where test.txt differs): put the run's data back there")):
        evaluate(first)
    os.rename(first, elsewhere)
    assert evaluate(elsewhere) >= 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"note: SST tree files in {elsewhere} are not "), err
