"""The JSB Chorales as piano rolls (NumPy only: no TensorFlow).

The Boulanger-Lewandowski et al. 2012 split of the JSB Chorales (229 / 76 / 77
chorales) is a JSON file ``{"train", "valid", "test"}`` of chorales, each a list of
steps, each a sorted list of the MIDI pitches sounding. This module finds, checks and
reads it and turns chorales into 88-key rolls; ``applications.music`` (which loads
TensorFlow) models them, and re-exports these names. Command lines (``benchmarks/
rladder.py jsb``) find a missing file here before they load TensorFlow.
"""

import json
import pathlib

import numpy as np

from applications.checks import integer_at_least
from applications.errors import DataNotFoundError, InputError
from applications.shared_data import shared_data_path

LOWEST_KEY = 21  # A0, MIDI 21: the piano's first key
NUM_KEYS = 88  # MIDI 21..108
SPLITS = ("train", "valid", "test")


def default_data_path():
    """``shared/data/jsb_chorales/jsb_chorales.json`` beside this checkout, if any."""
    return shared_data_path("jsb_chorales", "jsb_chorales.json")


def data_file(path=None):
    """The JSON file of the chorales that ``path`` names (the file, or a folder holding
    ``jsb_chorales.json``; None: the project's shared copy), checked to exist.

    Raises:
        applications.errors.DataNotFoundError: there is no such file.
    """
    path = pathlib.Path(path) if path is not None else default_data_path()
    if path.is_dir():
        path = path / "jsb_chorales.json"
    if not path.is_file():
        raise DataNotFoundError(f"{path} not found: pass the JSB Chorales JSON file or its folder")
    return path


def load_chorales(path=None):
    """The chorales of every split: ``{"train": [...], "valid": [...], "test": [...]}``.

    Args:
        path: the JSON file, or a folder holding ``jsb_chorales.json``; None looks
            for the project's shared copy.
    """
    path = data_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (ValueError, OSError) as error:  # JSONDecodeError, UnicodeDecodeError: was a bare traceback
        raise InputError(f"{path} is not a readable JSON file of chorales: {error}") from None
    if not isinstance(data, dict):  # a list of chorales was reported as lacking every split
        raise InputError(f"{path} must hold a JSON object with keys {SPLITS}. Received: a {type(data).__name__}")
    missing = [s for s in SPLITS if s not in data]
    if missing:
        raise InputError(f"{path} lacks the splits {missing}; expected keys {SPLITS}")
    for split in SPLITS:
        problem = _chorales_problem(data[split])
        if problem:
            # a step given as one pitch (60, not [60]) was a TypeError ("'int' object is not
            # iterable") and a pitch off the piano an error naming neither the file nor the chorale
            raise InputError(f"{path}: {split}{problem}")
    return {s: data[s] for s in SPLITS}


def _chorales_problem(chorales):
    """What is wrong with a split's chorales (a list of lists of lists of MIDI pitches), or None."""
    if not isinstance(chorales, list):
        return f" must be a list of chorales. Received: a {type(chorales).__name__}"
    for i, chorale in enumerate(chorales):
        if not isinstance(chorale, list):
            return f"[{i}] must be a list of steps. Received: {chorale!r:.40}"
        for t, step in enumerate(chorale):
            if not isinstance(step, list):
                return f"[{i}][{t}] must be a list of MIDI pitches. Received: {step!r:.40}"
            for pitch in step:
                # integral floats (60.0, as some conversions of the data write them) are pitches too
                if (isinstance(pitch, bool) or not isinstance(pitch, (int, float)) or not float(pitch).is_integer()
                        or not 0 <= pitch - LOWEST_KEY < NUM_KEYS):
                    return (f"[{i}][{t}] holds {pitch!r:.40}, not the MIDI pitch of a piano key "
                            f"(an integer in {LOWEST_KEY}..{LOWEST_KEY + NUM_KEYS - 1})")
    return None


def load_rolls(path=None, limit=None):
    """The piano rolls of every split (the first ``limit`` chorales of each) and the
    number of steps of the longest roll: ``({"train": [...], ...}, longest)``.

    Raises:
        applications.errors.InputError: the file holds no chorale in any split (it was
            a bare ``ValueError`` of ``max()``, "arg is an empty sequence").
    """
    if limit is not None:
        # a negative limit would silently drop the last chorales (data[s][:-1])
        limit = integer_at_least("limit", limit, 1)
    path = data_file(path)
    data = load_chorales(path)
    rolls = {s: [piano_roll(c) for c in data[s][:limit]] for s in SPLITS}
    if not any(rolls[s] for s in SPLITS):
        raise InputError(f"{path} holds no chorales: its splits {SPLITS} are all empty")
    return rolls, max(len(r) for s in SPLITS for r in rolls[s])


def piano_roll(chorale):
    """One chorale (a list of steps of MIDI pitches) as a ``[steps, 88]`` float32 0/1 roll."""
    roll = np.zeros((len(chorale), NUM_KEYS), "float32")
    for t, pitches in enumerate(chorale):
        for pitch in pitches:
            key = int(pitch) - LOWEST_KEY
            if not 0 <= key < NUM_KEYS:
                raise InputError(f"MIDI pitch {pitch} at step {t} is outside the piano (21..108)")
            roll[t, key] = 1.0
    return roll


__all__ = [
    "LOWEST_KEY",
    "NUM_KEYS",
    "SPLITS",
    "data_file",
    "default_data_path",
    "load_chorales",
    "load_rolls",
    "piano_roll",
]
