"""Reads the Stanford Sentiment Treebank (SST) from its PTB-style tree files.

A data directory holds ``train.txt``, ``dev.txt`` and ``test.txt``, one labelled
binary tree per line, for example ``(3 (2 It) (4 (4 works) (2 .)))``. Every node
carries a sentiment label from 0 (very negative) to 4 (very positive): the root's
label is the sentence's label, and every subtree is a labelled phrase.

Two standard tasks are read from the same files:

* SST-5 (``granularity="5"``): the five labels as they are.
* SST-2 (``granularity="2"``): label 2 (neutral) is dropped, 0 and 1 become 0
  (negative), 3 and 4 become 1 (positive).

Sentences (``phrases=False``) are the trees' roots; phrases (``phrases=True``) are the
distinct texts of all the subtrees of the split's trees, each with its label, as
used for training by several SST papers.

The reader knows nothing about any model: it returns plain Python strings (or token
lists) and numpy labels, for any text-classification pipeline.
"""

import dataclasses
import io
import os
import re

import numpy as np

from applications import checks
from applications.errors import DataNotFoundError, InputError, user_path
from applications.shared_data import shared_data_path

SPLITS = ("train", "dev", "test")
#: what the fingerprint of a folder of tree files says its data are (``arguments.data_fingerprint``)
FINGERPRINT_KIND = "SST tree files"
GRANULARITIES = ("5", "2")
_BLANKS = re.compile("[ \t\r\n]+")

# Penn Treebank escapes that occur in SST tokens, and their plain-text form.
PTB_ESCAPES = {
    "-LRB-": "(",
    "-RRB-": ")",
    "-LSB-": "[",
    "-RSB-": "]",
    "-LCB-": "{",
    "-RCB-": "}",
    "``": '"',
    "''": '"',
}


def unescape_token(token):
    """Plain text of one PTB token: ``-LRB-`` -> ``(``, ``\\/`` -> ``/``, ``````` -> ``"``."""
    token = PTB_ESCAPES.get(token, token)
    if "\\" in token:
        token = token.replace("\\/", "/").replace("\\*", "*")
    return token


@dataclasses.dataclass(frozen=True)
class Phrase:
    """A labelled subtree: tokens ``[start, end)`` of its sentence and its label."""

    start: int
    end: int
    label: int


@dataclasses.dataclass(frozen=True)
class Tree:
    """One parsed sentence: its label, its tokens and every labelled phrase in it.

    ``phrases`` lists every node of the tree (leaves and the root included) in
    post-order, so the root is last. ``phrase_tokens(p)`` gives a phrase's tokens.
    """

    label: int
    tokens: tuple
    phrases: tuple

    def phrase_tokens(self, phrase):
        return self.tokens[phrase.start : phrase.end]

    @property
    def text(self):
        return " ".join(self.tokens)


class TreeSyntaxError(InputError):
    """A line of a tree file is not a well-formed labelled tree (a ``ValueError``; one
    line on the command line, like every ``applications.errors.InputError``)."""


def _lex(line):
    """Splits a tree line into ``(``, ``)`` and atoms (labels and words).

    Only ASCII blanks separate items: a word may hold other white space (SST writes
    the film title "8 1/2" as one token with a no-break space).
    """
    return [item for item in _BLANKS.split(line.replace("(", " ( ").replace(")", " ) ")) if item]


def parse_tree(line, unescape=True):
    """Parses one PTB-style labelled tree.

    Args:
        line: text such as ``(3 (2 It) (4 (4 works) (2 .)))``.
        unescape: turn PTB escapes (``-LRB-``, ``-RRB-``, ``\\/``, ...) back into text.

    Returns:
        A ``Tree`` with the root label, the sentence tokens and all labelled phrases.

    Raises:
        TreeSyntaxError: if the text is not one well-formed tree with labels 0..4.
    """
    items = _lex(line)
    if not items:
        raise TreeSyntaxError("empty line: expected a tree like '(3 (2 It) (4 works))'")
    tokens, phrases = [], []
    # Stack of open nodes: [label, start token index, number of children].
    stack = []
    pos = 0
    root = None
    while pos < len(items):
        item = items[pos]
        if item == "(":
            if root is not None:
                raise TreeSyntaxError(f"text after the end of the tree at item {pos}: {item!r}")
            if pos + 1 >= len(items) or items[pos + 1] in ("(", ")"):
                raise TreeSyntaxError(f"a node without a label at item {pos}")
            label_text = items[pos + 1]
            if label_text not in ("0", "1", "2", "3", "4"):
                raise TreeSyntaxError(f"a label must be an integer 0..4. Received: {label_text!r}")
            if stack:
                stack[-1][2] += 1
            stack.append([int(label_text), len(tokens), 0])
            pos += 2
        elif item == ")":
            if not stack:
                raise TreeSyntaxError(f"unbalanced ')' at item {pos}")
            label, start, n_children = stack.pop()
            if len(tokens) == start:
                raise TreeSyntaxError(f"a node with no words at item {pos}")
            phrases.append(Phrase(start, len(tokens), label))
            if not stack:
                root = label
            pos += 1
        else:
            if not stack:
                raise TreeSyntaxError(f"a word outside any node at item {pos}: {item!r}")
            if root is not None:
                raise TreeSyntaxError(f"text after the end of the tree: {item!r}")
            node = stack[-1]
            if node[2]:
                raise TreeSyntaxError(f"a node mixes words and subtrees at item {pos}: {item!r}")
            tokens.append(unescape_token(item) if unescape else item)
            pos += 1
            # A leaf holds exactly one word.
            if pos < len(items) and items[pos] == "(":
                raise TreeSyntaxError(f"a node mixes words and subtrees at item {pos}: {item!r} then '('")
            if pos < len(items) and items[pos] != ")":
                raise TreeSyntaxError(f"a leaf with more than one word at item {pos}: {items[pos]!r}")
    if stack:
        raise TreeSyntaxError(f"{len(stack)} unclosed '(' at the end of the line")
    return Tree(label=root, tokens=tuple(tokens), phrases=tuple(phrases))


def split_path(data_dir, split):
    """Path of a split's tree file, with clear errors for a wrong directory or split."""
    if split not in SPLITS:
        raise InputError(f"`split` must be one of {SPLITS}. Received: split={split!r}")
    data_dir = os.fspath(data_dir)
    if not os.path.isdir(data_dir):
        raise DataNotFoundError(
            f"SST data directory not found: {data_dir!r}. It must hold the tree files "
            f"train.txt, dev.txt and test.txt (PTB-style, one labelled tree per line)."
        )
    path = os.path.join(data_dir, f"{split}.txt")
    if not os.path.isfile(path):
        raise DataNotFoundError(
            f"SST tree file not found: {path!r} (the {split!r} split; the directory must "
            f"hold train.txt, dev.txt and test.txt)."
        )
    return path


def require_split_files(data_dir, splits=SPLITS):
    """Checks that ``data_dir`` holds the tree files of ``splits`` before any work starts.

    Raises:
        DataNotFoundError: (a ``FileNotFoundError``) naming the missing directory or the
            first missing file.
    """
    for split in splits:
        split_path(data_dir, split)


def read_trees(data_dir, split, unescape=True):
    """Parses every tree of a split; errors name the file and the line number.

    Raises:
        TreeSyntaxError: a line is not a well-formed tree, the file is not UTF-8, or it
            holds no tree at all (empty or blank).
    """
    return list(iter_trees(data_dir, split, unescape=unescape))


def iter_trees(data_dir, split, unescape=True):
    """The trees of a split in file order, each parsed when it is asked for (a reader that
    stops early parses no more lines); the errors of :func:`read_trees`, a malformed
    line's when it is reached."""
    path = split_path(data_dir, split)
    with user_path(f"cannot read the SST tree file {str(path)!r}"), open(path, "rb") as f:
        data = f.read()
    try:
        # "utf-8-sig": a byte-order mark (files saved by some Windows editors) is not a word.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        start = error.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        number = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise TreeSyntaxError(
            f"{path}, line {number}: not UTF-8 text (byte 0x{data[start]:02x} at column {column}); "
            f"SST tree files are UTF-8"
        ) from None
    found = False
    # Lines split as a text-mode file would (\n, \r\n or \r), not at Unicode separators.
    with io.StringIO(text, newline=None) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue  # a blank line (e.g. a trailing newline) is not a tree
            try:
                tree = parse_tree(line, unescape=unescape)
            except TreeSyntaxError as error:
                raise TreeSyntaxError(f"{path}, line {number}: malformed tree: {error}") from None
            found = True
            yield tree
    if not found:
        # an empty (e.g. truncated) file gave empty texts and labels, and failed later, far from here
        raise TreeSyntaxError(f"{path} holds no trees: expected one labelled tree per line")


def _check_granularity(granularity):
    """``granularity`` as the string ``"5"`` or ``"2"`` (the ints 5 and 2 are accepted too)."""
    text = str(granularity)
    if isinstance(granularity, bool) or text not in GRANULARITIES:
        raise InputError(
            f"`granularity` must be '5' (SST-5) or '2' (SST-2). Received: granularity={granularity!r}"
        )
    return text


def map_label(label, granularity):
    """The task's label for an SST label 0..4, or None if the task drops it.

    Raises:
        InputError (a ValueError): a ``label`` that is not an integer 0..4 (SST-5 passed
        7 through and SST-2 mapped -1 to 0 or 1.5 to 0), or another ``granularity``.
    """
    # the int 5 was compared with "5" and mapped as SST-2 (3 -> 1), any other value as SST-2 too
    granularity = _check_granularity(granularity)
    label = checks.integer_at_least("label", label, 0)
    if label > 4:
        raise InputError(f"`label` must be an SST label 0..4. Received: label={label!r}")
    if granularity == "5":
        return label
    if label == 2:
        return None
    return 0 if label < 2 else 1


def load_split(data_dir, split, granularity="5", phrases=False, as_tokens=False, unescape=True, limit=None):
    """Texts and labels of one SST split.

    Args:
        data_dir: directory holding ``train.txt``, ``dev.txt`` and ``test.txt``.
        split: ``"train"``, ``"dev"`` or ``"test"``.
        granularity: ``"5"`` (SST-5, labels 0..4) or ``"2"`` (SST-2: neutral dropped,
            0/1 -> 0, 3/4 -> 1).
        phrases: False (default) for the trees' root sentences; True for every
            distinct phrase (subtree text, sentences included) of the split's trees,
            each once, in order of first appearance.
        as_tokens: return each text as a tuple of tokens instead of a string with
            the tokens joined by single spaces.
        unescape: undo PTB escapes such as ``-LRB-`` / ``-RRB-``.
        limit: None (all) or a positive number: the split's first ``limit`` examples,
            the same as the first ``limit`` of all of them; the trees after the one that
            completes them are not parsed (11,855 trees for a run's three splits took
            ~5-13 s on a busy CPU, for a quick run asking for a few dozen examples).

    Returns:
        ``(texts, labels)``: a list of strings (or token tuples) and an int32 array.
    """
    granularity = _check_granularity(granularity)
    limit = None if limit is None else checks.integer_at_least("limit", limit, 1)
    texts, labels = [], []
    seen = set()
    for tree in iter_trees(data_dir, split, unescape=unescape):
        nodes = tree.phrases if phrases else (tree.phrases[-1],)
        for node in nodes:
            tokens = tree.phrase_tokens(node)
            if phrases:
                if tokens in seen:
                    continue
                seen.add(tokens)
            label = map_label(node.label, granularity)
            if label is None:
                continue
            texts.append(tokens if as_tokens else " ".join(tokens))
            labels.append(label)
        if limit is not None and len(texts) >= limit:
            break  # (the next tree is not parsed)
    if not texts:
        # SST-2 drops label 2: a split of neutral trees only left nothing, and training
        # failed with a traceback (an empty vocabulary, or evaluate's empty results)
        raise InputError(
            f"{split_path(data_dir, split)} holds no {'phrase' if phrases else 'sentence'} with a label of "
            f"SST-{granularity}" + (" (SST-2 drops the neutral label 2)" if granularity == "2" else "")
        )
    return texts[:limit], np.asarray(labels[:limit], dtype="int32")


def default_data_dir():
    """``shared/data/sst`` beside this checkout (or beside a parent folder), if any."""
    return shared_data_path("sst")


def num_classes(granularity):
    """Number of classes of an SST task: 5 or 2."""
    # any granularity but "5" (e.g. "3") answered 2
    return 5 if _check_granularity(granularity) == "5" else 2


__all__ = [
    "Phrase",
    "Tree",
    "TreeSyntaxError",
    "parse_tree",
    "read_trees",
    "load_split",
    "map_label",
    "num_classes",
    "default_data_dir",
    "split_path",
    "unescape_token",
]
