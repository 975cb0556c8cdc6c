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


def check_the_recorded_sst_folder(run, argv, evaluate, key, expected, tmp_path, capsys, nothing_recorded):
    """Checks ``evaluate`` of a run trained on SST tree files without a folder of them given
    (``run``: a copy of the run's folder, whose ``metrics.json`` is rewritten here to record
    a copy of its tree files): the command line's ``argv`` (``evaluate APP --model RUN
    ...`` without ``--data-dir``) and ``evaluate`` (a Python function of ``data_dir``
    returning the result) score the files in the folder ``train`` recorded: ``key`` of the
    result is ``expected``. Once that folder is gone, that is one line naming it (a
    ``DataNotFoundError`` in Python); a folder given wins; with nothing recorded, one line
    starting with ``nothing_recorded``."""
    import json
    import os
    import re
    import shutil

    import pytest

    from applications import __main__ as cli
    from applications.errors import DataNotFoundError

    metrics_path, first, moved = run / "metrics.json", tmp_path / "first", tmp_path / "moved"
    metrics = json.loads(metrics_path.read_text())
    fingerprint = metrics["data_fingerprint"]
    first.mkdir()
    for name in fingerprint["files"]:
        shutil.copy(os.path.join(fingerprint["source"], name), first / name)
    metrics_path.write_text(json.dumps({**metrics, "data_fingerprint": {**fingerprint, "source": str(first)}}))

    def scored(arguments, code=0):
        capsys.readouterr()
        assert cli.main(arguments) == code
        out, err = capsys.readouterr()
        if code:
            assert err.startswith("keras-capsules: error: ") and err.count("\n") == 1, err
            return err
        assert err == "", err
        return json.loads(out)[key]

    assert scored(argv) == pytest.approx(expected, abs=1e-6)
    assert evaluate(None)[key] == pytest.approx(expected, abs=1e-6)
    os.rename(first, moved)  # the recorded folder is gone: the usual one-line error, naming it
    err = scored(argv, code=2)
    assert f"SST data directory not found: {str(first)!r}" in err, err
    with pytest.raises(DataNotFoundError, match=re.escape(f"SST data directory not found: {str(first)!r}")):
        evaluate(None)
    # a folder given wins (the run's files moved there: its test score, without a note)
    assert scored([*argv, "--data-dir", str(moved)]) == pytest.approx(expected, abs=1e-6)
    assert evaluate(str(moved))[key] == pytest.approx(expected, abs=1e-6)
    # nothing recorded (a run of an older version, a model moved away from its run)
    metrics_path.write_text(json.dumps({k: v for k, v in metrics.items() if k != "data_fingerprint"}))
    err = scored(argv, code=2)
    assert err.startswith(f"keras-capsules: error: {nothing_recorded}"), err
    with pytest.raises(DataNotFoundError):
        evaluate(None)
    assert scored([*argv, "--data-dir", str(moved)]) == pytest.approx(expected, abs=1e-6)
