"""The SST tree-file loader: real split sizes, phrase extraction, clear errors."""

import os

import numpy as np
import pytest

from applications import sst_trees
from tests.applications.tiny_data import real_sst_split
from tests.conftest import shared_path


SST = shared_path("data", "sst")

TINY = "(3 (2 (2 The) (2 -LRB-new-RRB-)) (4 (4 (2 film) (4 shines)) (2 .)))"


@pytest.mark.parametrize(
    "granularity, counts",
    [("5", {"train": 8544, "dev": 1101, "test": 2210}), ("2", {"train": 6920, "dev": 872, "test": 1821})],
)
def test_split_sizes_match_the_standard_splits(granularity, counts):
    for split, expected in counts.items():
        texts, labels = real_sst_split(split, granularity)
        assert len(texts) == len(labels) == expected, (split, len(texts))
        assert labels.dtype == np.int32
        assert set(np.unique(labels)) == set(range(int(granularity)))
        assert all(isinstance(t, str) and t for t in texts)


def test_real_sentences_are_unescaped_and_first_sentence_is_known():
    texts, labels = real_sst_split("train", "5")
    assert texts[0].startswith("The Rock is destined to be the 21st Century 's new")
    assert labels[0] == 3
    joined = "\n".join(texts)
    for escaped in ("-LRB-", "-RRB-", "``", "''", "\\/"):
        assert escaped not in joined
    assert "(" in joined and ")" in joined
    raw, _ = real_sst_split("train", "5", unescape=False)
    assert "-LRB-" in "\n".join(raw)


def test_sst2_drops_neutral_and_merges_polarities():
    five, labels5 = real_sst_split("dev", "5")
    two, labels2 = real_sst_split("dev", "2")
    expected = [(t, int(l >= 3)) for t, l in zip(five, labels5) if l != 2]
    assert list(zip(two, labels2.tolist())) == expected


def test_only_whole_escaped_tokens_are_unescaped():
    tree = sst_trees.parse_tree(TINY)
    assert tree.label == 3 and tree.text == "The -LRB-new-RRB- film shines ."
    assert [sst_trees.unescape_token(t) for t in ("-LRB-", "-RSB-", "``", "''", "1\\/2", "\\*")] == [
        "(", "]", '"', '"', "1/2", "*"]


def test_phrases_of_a_hand_written_tree():
    line = "(3 (2 (2 The) (2 -LRB-)) (4 (4 (2 film) (4 shines)) (1 .)))"
    tree = sst_trees.parse_tree(line)
    assert tree.label == 3
    assert tree.tokens == ("The", "(", "film", "shines", ".")
    spans = {(p.start, p.end, p.label) for p in tree.phrases}
    assert spans == {
        (0, 1, 2), (1, 2, 2), (0, 2, 2),              # The, (, "The ("
        (2, 3, 2), (3, 4, 4), (2, 4, 4), (4, 5, 1),  # film, shines, "film shines", .
        (2, 5, 4), (0, 5, 3),                         # "film shines .", the sentence
    }
    assert tree.phrases[-1] == sst_trees.Phrase(0, 5, 3)  # post-order: the root is last
    assert tree.phrase_tokens(sst_trees.Phrase(2, 4, 4)) == ("film", "shines")
    raw = sst_trees.parse_tree(line, unescape=False)
    assert raw.tokens[1] == "-LRB-"


def test_unique_phrases_of_tiny_files(tmp_path):
    lines = [
        "(3 (2 (2 The) (2 film)) (4 (4 shines) (2 .)))",
        "(1 (2 (2 The) (2 film)) (0 (0 bores) (2 .)))",  # repeats "The", "film", "The film", "."
    ]
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.txt").write_text("\n".join(lines) + "\n\n")
    texts, labels = sst_trees.load_split(tmp_path, "train", "5", phrases=True)
    assert texts == ["The", "film", "The film", "shines", ".", "shines .", "The film shines .",
                     "bores", "bores .", "The film bores ."]
    assert labels.tolist() == [2, 2, 2, 4, 2, 4, 3, 0, 0, 1]
    texts2, labels2 = sst_trees.load_split(tmp_path, "train", "2", phrases=True)
    assert texts2 == ["shines", "shines .", "The film shines .", "bores", "bores .", "The film bores ."]
    assert labels2.tolist() == [1, 1, 1, 0, 0, 0]
    tokens, _ = sst_trees.load_split(tmp_path, "test", "5", as_tokens=True)
    assert tokens == [("The", "film", "shines", "."), ("The", "film", "bores", ".")]


def test_real_training_phrases_are_unique_and_include_every_sentence():
    phrases, labels = real_sst_split("train", "5", phrases=True)
    sentences, sentence_labels = real_sst_split("train", "5")
    assert len(set(phrases)) == len(phrases)
    assert 150_000 < len(phrases) < 170_000
    label_of = dict(zip(phrases, labels.tolist()))
    # A sentence repeated in the training file is one phrase; labels agree.
    assert all(label_of[s] == l for s, l in zip(sentences, sentence_labels.tolist()))
    assert np.bincount(labels, minlength=5).min() > 5_000


@pytest.mark.parametrize(
    "line, message",
    [
        ("(3 (2 a)", "unclosed"),
        ("(3 (2 a)))", "unbalanced"),
        ("(7 (2 a) (2 b))", "0..4"),
        ("(x a)", "0..4"),
        ("(2 a b)", "more than one word"),
        ("2 a", "outside any node"),
        ("(3 (2 a) b)", "mixes words and subtrees"),
        # Audit 5: a word followed by a subtree was called "a leaf with more than one word".
        ("(3 a (2 b))", r"mixes words and subtrees at item 3: 'a' then '\('"),
        ("(3 (2 a)) (2 b)", "after the end"),
        ("( (2 a))", "without a label"),
        ("(3)", "no words"),
    ],
)
def test_malformed_trees_raise_clear_errors(line, message):
    with pytest.raises(sst_trees.TreeSyntaxError, match=message):
        sst_trees.parse_tree(line)


def test_malformed_line_error_names_file_and_line(tmp_path):
    (tmp_path / "train.txt").write_text(f"{TINY}\n{TINY}\n(3 (2 broken)\n{TINY}\n")
    with pytest.raises(sst_trees.TreeSyntaxError, match=r"train\.txt, line 3: malformed tree"):
        sst_trees.load_split(tmp_path, "train")


def test_a_byte_order_mark_and_windows_line_ends_are_read(tmp_path):
    # Audit 5: a file saved with a UTF-8 byte-order mark failed at line 1 with
    # "a word outside any node at item 0: '\\ufeff'".
    text = "(3 (2 It) (4 works))\r\n\r\n(2 caf\u00e9)\r\n(1 a\u2028b)\r\n"
    (tmp_path / "train.txt").write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    texts, labels = sst_trees.load_split(tmp_path, "train")
    assert texts == ["It works", "caf\u00e9", "a\u2028b"] and labels.tolist() == [3, 2, 1]


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_a_file_that_is_not_utf8_names_the_file_and_line(tmp_path, bom):
    # Audit 5: a Latin-1 file raised UnicodeDecodeError "'utf-8' codec can't decode byte
    # 0xe9 in position 27", naming neither the file nor the line.
    (tmp_path / "dev.txt").write_bytes(bom + f"{TINY}\n(2 caf\u00e9)\n".encode("latin-1"))
    with pytest.raises(sst_trees.TreeSyntaxError,
                       match=r"dev\.txt, line 2: not UTF-8 text \(byte 0xe9 at column 7\)"):
        sst_trees.load_split(tmp_path, "dev")


def test_missing_directory_file_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="SST data directory not found"):
        sst_trees.load_split(tmp_path / "nowhere", "train")
    with pytest.raises(FileNotFoundError, match=r"dev\.txt"):
        sst_trees.load_split(tmp_path, "dev")
    with pytest.raises(ValueError, match="split="):
        sst_trees.load_split(SST, "validation")
    with pytest.raises(ValueError, match="granularity="):
        sst_trees.load_split(SST, "dev", granularity="3")
    assert sst_trees.num_classes("5") == 5 and sst_trees.num_classes(2) == 2


def test_granularity_is_checked_by_every_helper():
    # Audit 8: map_label(3, 5) (the int 5, which load_split accepts) mapped as SST-2 and gave 1,
    # and num_classes("3") answered 2, instead of refusing the granularity.
    assert sst_trees.map_label(3, 5) == 3 and sst_trees.map_label(3, 2) == 1
    assert sst_trees.map_label(2, "2") is None
    for bad in ("3", 3, None, True):
        with pytest.raises(ValueError, match="Received: granularity="):
            sst_trees.map_label(3, bad)
        with pytest.raises(ValueError, match="Received: granularity="):
            sst_trees.num_classes(bad)


@pytest.mark.parametrize("label", [-1, 5, 7, 1.5, "3", True, None])
def test_map_label_refuses_anything_but_an_sst_label(label):
    # Audit s80: SST-5 passed 7 through as a class, SST-2 mapped -1 to 0 and 1.5 to 0.
    for granularity in ("5", "2"):
        with pytest.raises(ValueError, match="Received: label="):
            sst_trees.map_label(label, granularity)


def test_map_label_takes_numpy_labels():
    assert [sst_trees.map_label(np.int64(k), "2") for k in range(5)] == [0, 0, None, 1, 1]
    assert [sst_trees.map_label(np.int32(k), "5") for k in range(5)] == [0, 1, 2, 3, 4]


def test_an_empty_tree_file_is_a_clear_error(tmp_path):
    # Audit 8: an empty (or blank) split file gave no texts and an empty label array, silently.
    for split, text in (("train", ""), ("dev", "\n  \n")):
        (tmp_path / f"{split}.txt").write_text(text)
        with pytest.raises(sst_trees.TreeSyntaxError, match=rf"{split}\.txt holds no trees"):
            sst_trees.load_split(tmp_path, split)


def test_a_split_with_nothing_left_after_sst2_drops_the_neutral_label_is_an_input_error(tmp_path):
    # A split of neutral trees only came back empty: text_classification and sst failed
    # with tracebacks (an empty vocabulary, evaluate's empty results), and sst trained on
    # an empty training split and reported accuracies of 0.0 with exit 0.
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.txt").write_text("(3 (2 fine) (3 film))\n")
    (tmp_path / "test.txt").write_text("(2 (2 fine) (2 .))\n")
    assert sst_trees.load_split(tmp_path, "test", "5")[0] == ["fine ."]
    with pytest.raises(ValueError, match=r"test.txt holds no sentence with a label of SST-2 \(SST-2 drops"):
        sst_trees.load_split(tmp_path, "test", "2")
    with pytest.raises(ValueError, match="test.txt holds no phrase"):
        sst_trees.load_split(tmp_path, "test", "2", phrases=True)


def test_a_limit_parses_only_the_trees_that_hold_its_examples(tmp_path, monkeypatch):
    # Every SST preparation (applications/sst.py) parsed all the trees of its splits (11,855: ~6 s on a busy CPU),
    # also for `--max-train 48 --max-eval 24`. With a limit the parse now stops at the tree
    # that completes it, and gives the first examples of the whole split: the same texts,
    # labels and order, also for SST-2's distinct phrases (a phrase first seen neutral is
    # never taken from a later tree) and for a limit beyond the split (all of it).
    parse = sst_trees.parse_tree
    parsed = []
    monkeypatch.setattr(sst_trees, "parse_tree", lambda line, *a, **kw: parsed.append(line) or parse(line, *a, **kw))
    for split, granularity, phrases, limit in (("train", "5", False, 300), ("dev", "2", False, 40),
                                               ("dev", "2", True, 3000), ("dev", "5", True, 500),
                                               ("dev", "2", False, 10**6)):
        case = (split, granularity, phrases, limit)
        # (sentences: the same arguments as the other tests, parsed once for the module)
        whole_texts, whole_labels = real_sst_split(split, granularity, **({"phrases": True} if phrases else {}))
        parsed.clear()
        texts, labels = sst_trees.load_split(SST, split, granularity, phrases=phrases, limit=limit)
        assert texts == whole_texts[:limit], case
        assert labels.dtype == whole_labels.dtype and labels.tolist() == whole_labels[:limit].tolist(), case
        with open(os.path.join(SST, f"{split}.txt"), encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
        # the file's first trees, in order, and not one more than the limit needs
        assert parsed == lines[:len(parsed)], case
        if limit >= len(whole_texts):
            assert len(parsed) == len(lines), case
        else:
            assert len(parsed) < len(lines), case
            fewer = tmp_path / f"{split}-{granularity}-{phrases}"
            fewer.mkdir()
            (fewer / f"{split}.txt").write_text("".join(lines[:len(parsed) - 1]), encoding="utf-8")
            assert len(sst_trees.load_split(fewer, split, granularity, phrases=phrases)[0]) < limit, case
    assert len(parsed) == 1101  # the dev split parsed once, not twice for its limit beyond its size
    # (no phrase of the real SST is neutral in one tree and not in another: a split that has one)
    relabelled = tmp_path / "relabelled"
    relabelled.mkdir()
    (relabelled / "dev.txt").write_text("(2 (2 good) (2 film))\n(3 (3 good) (4 fun))\n(4 (4 fun) (3 good))\n")
    assert sst_trees.load_split(relabelled, "dev", "2", phrases=True)[0] == ["fun", "good fun", "fun good"]
    for limit in (1, 2, 3, 4):
        texts, labels = sst_trees.load_split(relabelled, "dev", "2", phrases=True, limit=limit)
        assert texts == ["fun", "good fun", "fun good"][:limit] and labels.tolist() == [1, 1, 1][:limit], limit
    # a malformed tree or a byte that is not UTF-8 among the trees needed: the reader's error,
    # naming the file and the line; a malformed tree after them is not read
    lines = [line for line in open(os.path.join(SST, "dev.txt"), encoding="utf-8")][:5]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "dev.txt").write_text("".join(lines[:3]) + "(3 (2 It) (4 works\n" + "".join(lines[3:]), encoding="utf-8")
    texts, labels = sst_trees.load_split(broken, "dev", "5", phrases=False, limit=3)
    dev_texts, dev_labels = real_sst_split("dev", "5")
    assert texts == dev_texts[:3] and labels.tolist() == dev_labels[:3].tolist()
    with pytest.raises(sst_trees.TreeSyntaxError, match=r"dev\.txt, line 4: malformed tree: 2 unclosed"):
        sst_trees.load_split(broken, "dev", "5", phrases=False, limit=4)
    (broken / "dev.txt").write_bytes(lines[0].encode() + b"(2 caf\xe9)\n")
    with pytest.raises(sst_trees.TreeSyntaxError, match=r"dev\.txt, line 2: not UTF-8 text"):
        sst_trees.load_split(broken, "dev", "5", phrases=False, limit=1)
    (broken / "dev.txt").write_text("(2 (2 It) (2 is))\n", encoding="utf-8")  # no example of SST-2
    with pytest.raises(ValueError, match="holds no sentence with a label of SST-2"):
        sst_trees.load_split(broken, "dev", "2", phrases=False, limit=1)
