"""Text pipelines for capsule text classification: preprocessing, vocabulary, datasets.

Everything that touches strings runs as TensorFlow ops (``tf.strings`` and
tensorflow-text), so the same preprocessing runs inside ``tf.data``, in a served
model's input function, or eagerly on a few strings.

Preprocessing (as in Ren & Lu's experiments): Unicode NFC normalization (a word
spelled with combining accents and its precomposed spelling are one token);
lowercase; put spaces around every character that is neither a letter, a digit, a
combining mark nor a zero-width (non-)joiner (punctuation becomes tokens of its own;
accents, vowel signs and joiners stay in their word); split numbers from words and
into single digits; split on white space; keep the first ``max_length`` tokens (5,000
by default)::

    "Hello, World! It's 2019."
    -> hello , world ! it ' s 2 0 1 9 .

Ids: a vocabulary of the most frequent training tokens, read by a
``keras.layers.StringLookup`` with id 0 for padding and id 1 for out-of-vocabulary
tokens; real words have ids from 2.

Datasets (raw pipelines of ``(text, label)`` pairs, see :func:`load_split`):

* TFDS builders of the Zhang et al. (2015) benchmarks that TFDS 4.9 ships:
  ``ag_news`` (``ag_news_subset``: title and description joined, 4 classes) and
  ``yelp_polarity`` (``yelp_polarity_reviews``, 2 classes, the CSV escapes of its
  texts undone: :func:`unescape_csv_text`); both have train and test splits only.
  (DBPedia, Yahoo! Answers, Yelp full and the Amazon sets have no TFDS builder in 4.9.)
* ``sst2`` / ``sst5``: the Stanford Sentiment Treebank tree files read by
  :mod:`applications.sst_trees` (train / dev / test; roots for evaluation, optionally
  every distinct phrase for training).
"""

import collections
import functools
import numbers
import os

import numpy as np
import tensorflow as tf

from applications import checks, console, distribute
from applications.checks import integer_at_least
from applications.errors import InputError, user_path

MAX_LENGTH = 5000
PAD_ID = 0
OOV_ID = 1
OOV_TOKEN = "[UNK]"

# name -> (TFDS builder, text feature(s), number of classes)
TFDS_DATASETS = {
    "ag_news": ("ag_news_subset", ("title", "description"), 4),
    "yelp_polarity": ("yelp_polarity_reviews", ("text",), 2),
}
# TFDS sets whose texts keep the escapes of Zhang et al.'s CSV files: TFDS's
# yelp_polarity_reviews cuts each line's text out of its quotes without reading it as
# CSV, so a line break is still a backslash and an "n", and a quote is doubled.
# Unread, the backslash became a token and its "n" the start of the next word ("the
# staff" after a line break was "nthe staff").
CSV_ESCAPED_DATASETS = ("yelp_polarity",)
SST_DATASETS = {"sst2": "2", "sst5": "5"}
DATASETS = tuple(TFDS_DATASETS) + tuple(SST_DATASETS)

# Letters (\pL), digits (\pN) and combining marks (\pM: accents, Indic vowel signs) form
# words; any other character is a token of its own. (Without \pM, "naïve" written with a
# combining diaeresis became "nai", "\u0308", "ve", and Devanagari words fell apart.) The
# zero-width non-joiner and joiner (U+200C, U+200D) belong to Persian and Indic spellings.
_NOT_WORD = r"([^\pL\pN\pM\x{200C}\x{200D}])"
_DIGIT = r"(\pN)"


# ---------------------------------------------------------------------- tokens


def preprocess(texts, max_length=MAX_LENGTH):
    """Splits text into the paper's tokens with TensorFlow ops.

    Args:
        texts: a string tensor of any rank (a scalar, ``[batch]``, ...), or Python
            strings.
        max_length: keep at most this many tokens per text (None keeps all).

    Returns:
        The tokens: a 1-D string tensor for a scalar input, otherwise a
        ``tf.RaggedTensor`` with one more (ragged) axis than ``texts``.
    """
    if max_length is not None:
        max_length = integer_at_least("max_length", max_length, 1)
    texts = tf.convert_to_tensor(texts, dtype=tf.string)
    rank = texts.shape.rank
    tokens = _tokens(texts) if rank is None else _tokenizer(rank)(texts)
    if max_length is not None:
        tokens = tokens[..., : int(max_length)]
    return tokens


def _tokens(texts):
    import tensorflow_text as tf_text

    x = tf_text.normalize_utf8(texts, "NFC")  # decomposed and precomposed accents alike
    # a NUL is a space: tf.strings.lower(encoding="utf-8") drops everything after it
    x = tf.strings.regex_replace(x, r"\x00", " ")
    x = tf.strings.lower(x, encoding="utf-8")
    x = tf.strings.regex_replace(x, _NOT_WORD, r" \1 ")
    x = tf.strings.regex_replace(x, _DIGIT, r" \1 ")
    return tf_text.WhitespaceTokenizer().tokenize(x)


@functools.lru_cache(maxsize=None)
def _tokenizer(rank):
    """:func:`_tokens` of texts of rank ``rank``, a ``tf.function`` traced once in a process:
    traced anew in every pipeline's map, the ops took about half a second each time (the
    vocabulary, each split, each ``evaluate``)."""
    return tf.function(_tokens, input_signature=[tf.TensorSpec([None] * rank, tf.string)])


def build_vocabulary(texts, max_size=None, min_count=1, max_length=MAX_LENGTH, batch_size=1024, verbose=0):
    """The most frequent tokens of a corpus, most frequent first.

    Ties are broken alphabetically (by UTF-8 bytes), so the result does not depend
    on the order of the texts.

    Args:
        texts: a list of strings or a ``tf.data.Dataset`` of scalar strings (or of
            ``(text, label)`` pairs, whose texts are used).
        max_size: size of the whole id space, *including* the padding and OOV ids
            (so at most ``max_size - 2`` words are kept); None keeps every token.
        min_count: drop tokens seen fewer times than this.
        max_length: tokens kept per text, as in :func:`preprocess`.
        batch_size: texts tokenized at a time.
        verbose: 1 or 2 shows a progress bar of the texts read (one pass over a large
            training split takes minutes); 0 (default) is silent. Another value is
            refused with an ``InputError`` (:func:`applications.checks.verbosity`).

    Returns:
        A list of words (Python ``str``), without the reserved padding / OOV entries.
    """
    if max_length is not None:  # here, not in the map below (there: a StagingError traceback)
        max_length = integer_at_least("max_length", max_length, 1)
    if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, numbers.Integral)
                                 or max_size < 3):
        # (3.7 was taken as 3 and "10" as 10)
        raise InputError(f"`max_size` must be an integer >= 3 (padding, OOV, one word). Received: max_size={max_size!r}")
    # before the pass over the texts: min_count=None or "2" was a TypeError after it (minutes on
    # a large split), NaN an empty vocabulary without a word; batch_size a TensorFlow error
    min_count = integer_at_least("min_count", min_count, 0)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    verbose = checks.verbosity(verbose)  # ("no" showed the progress bar)
    if isinstance(texts, (str, bytes)):
        # list("good film") is its characters: a vocabulary of letters, silently
        raise InputError(
            f"`texts` must be a list of strings or a tf.data.Dataset, not one string. Received: texts={texts!r:.60}"
        )
    if isinstance(texts, tf.data.Dataset):
        dataset = texts
        if isinstance(dataset.element_spec, tuple):
            dataset = dataset.map(lambda text, *rest: text)
    else:
        dataset = tf.data.Dataset.from_tensor_slices(tf.constant(list(texts), dtype=tf.string))
    progress = console.progress_bar(dataset, "text", verbose)
    dataset = dataset.batch(batch_size).map(
        lambda batch: (preprocess(batch, max_length).flat_values, tf.size(batch)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    counts = collections.Counter()
    seen = 0
    for tokens, n in dataset.as_numpy_iterator():
        counts.update(tokens.tolist())
        seen += int(n)
        if progress is not None:
            progress.add(int(n))
    console.finish(progress, seen)
    words = sorted((item for item in counts.items() if item[1] >= min_count), key=lambda kv: (-kv[1], kv[0]))
    if max_size is not None:
        words = words[: int(max_size) - 2]
    return [word.decode("utf-8") for word, _ in words]


def make_lookup(vocabulary):
    """A ``StringLookup`` from tokens to ids: 0 = padding, 1 = OOV, words from 2."""
    import keras

    return keras.layers.StringLookup(
        vocabulary=list(vocabulary),
        mask_token="",
        oov_token=OOV_TOKEN,
        num_oov_indices=1,
        output_mode="int",
    )


def save_vocabulary(vocabulary, path):
    """Writes one word per line (UTF-8); id of line ``n`` (from 0) is ``n + 2``."""
    with open(path, "w", encoding="utf-8") as f:
        for word in vocabulary:
            f.write(word + "\n")


# A line of these characters only is blank. (The tokenizer's white space, ICU's, has no
# "\x1c" to "\x1f", which str.isspace counts: those can be tokens, hence lines.)
_BLANK = " \t\r\f\v"


def load_vocabulary(path):
    """The words of a vocabulary file of :func:`save_vocabulary`: one word per line.

    Checked, since the ids are the line numbers (``n + 1`` for line ``n`` from 1) and a
    file may have been edited by hand: a blank line, a word that an earlier line holds
    or bytes that are not UTF-8 are refused. :func:`build_vocabulary` makes none of
    those (its tokens hold no white space and come once). A line that no token can be
    (``"[UNK]"``, tokenized as ``[``, ``unk``, ``]``) is kept: an id no text gets, as
    Keras' ``StringLookup`` takes it (not the out-of-vocabulary id 1).

    Raises:
        InputError: (a ``ValueError``) naming the file, the line and what is wrong,
            in one line (Keras' ``StringLookup`` refused such a vocabulary with a
            message that named neither).
        PathError: the file cannot be read (a folder, no permission): one line.
    """
    name = os.fspath(path)
    with user_path(f"cannot read the vocabulary {name!r}"), open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        number = data.count(b"\n", 0, error.start) + 1
        raise InputError(f"the vocabulary {name!r}: line {number} is not UTF-8 text ({error.reason} "
                         f"at byte {error.start}): save it as UTF-8") from None
    # Lines as a text file reads them ("\r\n" and "\r" end a line too); the last line's
    # end is no line of its own.
    words = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if words[-1] == "":
        words.pop()
    first = {}
    for number, word in enumerate(words, 1):
        what = None
        if not word.strip(_BLANK):
            what = "is blank"
        elif word in first:
            what = f"repeats {word!r} of line {first[word]}"
        if what:
            raise InputError(f"the vocabulary {name!r}: line {number} {what}; it must hold one word per "
                             "line, each once, as the vocab.txt that `train` writes")
        first[word] = number
    return words


def encode(texts, lookup, max_length=MAX_LENGTH):
    """Token ids of texts: ``int32``, a 1-D tensor for a scalar, otherwise ragged."""
    return tf.cast(lookup(preprocess(texts, max_length)), tf.int32)


# ---------------------------------------------------------------------- batching

DEFAULT_BOUNDARIES = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048)


def bucket_batches(dataset, batch_size, boundaries=DEFAULT_BOUNDARIES, drop_remainder=False):
    """Batches ``(ids, label)`` pairs of similar length, padding ids with 0.

    Sequences are grouped by length into buckets ``[0, b1), [b1, b2), ...,
    [b_last, inf)`` and padded to the longest sequence of their batch (not to the
    bucket boundary), so padding stays small and batches differ in length.

    Args:
        dataset: unbatched ``tf.data.Dataset`` of ``(ids [length], label)``.
        batch_size: sequences per batch (the same for every bucket).
        boundaries: increasing bucket boundaries (sequence lengths).
        drop_remainder: drop each bucket's last partial batch.

    Returns:
        A dataset of ``(ids [batch, length], labels [batch])``.
    """
    batch_size = integer_at_least("batch_size", batch_size, 1)
    boundaries = [int(b) for b in boundaries]
    if any(b2 <= b1 for b1, b2 in zip(boundaries, boundaries[1:])) or (boundaries and boundaries[0] < 1):
        raise InputError(f"`boundaries` must be increasing positive lengths. Received: boundaries={boundaries}")
    return dataset.bucket_by_sequence_length(
        element_length_func=lambda ids, label: tf.shape(ids)[0],
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
        padded_shapes=([None], []),
        padding_values=(tf.constant(PAD_ID, tf.int32), tf.constant(0, tf.int32)),
        drop_remainder=drop_remainder,
    )


#: what ``make_dataset(..., count_truncated=True)`` counts: the texts longer than
#: ``max_length`` tokens (cut to their first ``max_length``) and all texts
Truncation = collections.namedtuple("Truncation", ["truncated", "texts"])


def make_dataset(
    raw,
    lookup,
    batch_size=30,
    shuffle=False,
    seed=0,
    max_length=MAX_LENGTH,
    boundaries=DEFAULT_BOUNDARIES,
    cache=True,
    drop_empty=None,
    count_truncated=False,
    verbose=0,
    first_epoch=None,
    replicas=1,
):
    """From raw ``(text, label)`` pairs to shuffled, length-bucketed id batches.

    Args:
        raw: ``tf.data.Dataset`` of ``(text, label)`` scalars (see :func:`load_split`).
        lookup: the ``StringLookup`` of :func:`make_lookup`.
        batch_size: sequences per batch.
        shuffle: shuffle the examples (every epoch) before bucketing.
        seed: shuffle seed, an integer >= 0 (None: another order every run, not
            with ``first_epoch`` and ``shuffle``); refused with an ``InputError`` here.
        max_length: tokens kept per text.
        boundaries: bucket boundaries, see :func:`bucket_batches`.
        cache: keep the encoded ids in memory after the first pass.
        drop_empty: drop texts without a token (empty or blank). None (default):
            drop them only when shuffling, i.e. from training data, where they carry
            no evidence. Kept, such a text is read as one unknown word (``[OOV_ID]``),
            so that evaluation counts every example and its scores stay finite.
        count_truncated: also count the texts longer than ``max_length`` tokens (those
            the pipeline cuts), from the token counts the tokenizer gives anyway. The
            count is one pass over the encoded texts, which fills the cache (with
            ``cache=False`` it is a pass of its own).
        verbose: 1 or 2 shows a progress bar of that pass (texts encoded), and of the
            count of the batches of an epoch with ``first_epoch``; 0 (default) is silent.
            Another value is refused with an ``InputError``
            (:func:`applications.checks.verbosity`).
        first_epoch: None (default): the dataset is one epoch, which ``tf.data``
            reshuffles (with ``shuffle``) each time it is iterated, from ``seed`` and the
            number of iterations made so far in this process: a run resumed in a new
            process at epoch ``k`` would train on the orders of epochs 0, 1, ... again.
            An epoch number ``k``: the endless stream of the epochs ``k, k + 1, ...``
            (``distribute.epoch_stream``), epoch ``e`` shuffled by ``(seed, e)`` alone,
            so that a run resumed at epoch ``k`` trains on the uninterrupted run's
            orders; train on it with ``fit(stream, steps_per_epoch=batches)``. Its
            batches per epoch are counted once here (a pass over the encoded texts,
            which fills the cache): the same for every order, since every bucket holds
            the same texts whatever their order, and so the same number of full batches
            and the same last partial one (``bucket_batches``).
        replicas: the training batches are cut for that many replicas in sync
            (``distribute.even_batches``; default 1: as they are), before they are
            counted with ``first_epoch``.

    Returns:
        A dataset of ``(ids [batch, length] int32, labels [batch] int32)``; with
        ``first_epoch``, the pair ``(stream, batches)``: the endless stream and its
        batches per epoch. With ``count_truncated``, the pair ``(that,
        Truncation(truncated, texts))``: the number of texts cut and of all texts in
        the dataset (after ``drop_empty``).
    """

    if max_length is not None:  # here, not in the map below (there: a StagingError traceback)
        max_length = integer_at_least("max_length", max_length, 1)
    if first_epoch is not None:  # before the passes over the texts
        first_epoch = integer_at_least("first_epoch", first_epoch, 0)
    # here, not in tf.data: 1.5 and "a" were raw TensorFlow errors (with `first_epoch` only
    # when the stream was read), True and -1 were taken
    seed = checks.stream_seed(seed, first_epoch if shuffle else None)
    verbose = checks.verbosity(verbose)  # ("no" showed the progress bars)

    def to_ids(text, label):
        # as encode(text, lookup, max_length), keeping whether the text was cut: the
        # tokenizer has counted its tokens already
        tokens = preprocess(text, None)
        if max_length is None:
            cut = tf.constant(False)
        else:
            cut = tf.size(tokens) > max_length
            tokens = tokens[..., :max_length]
        return tf.cast(lookup(tokens), tf.int32), tf.cast(label, tf.int32), cut

    if drop_empty is None:
        drop_empty = bool(shuffle)
    ds = raw.map(to_ids, num_parallel_calls=tf.data.AUTOTUNE)
    if drop_empty:
        # An empty text would give an all-padding row; it carries no evidence.
        ds = ds.filter(lambda ids, label, cut: tf.size(ids) > 0)
    else:
        # Evaluation counts every example (dropping them raised the accuracy over the
        # remaining ones): an all-padding row has no real token to average (NaN scores),
        # so an empty text reads as one unknown word.
        def at_least_one(ids, label, cut):
            return tf.cond(tf.size(ids) > 0, lambda: ids, lambda: tf.constant([OOV_ID], tf.int32)), label, cut

        ds = ds.map(at_least_one)
    if cache:
        ds = ds.cache()
    if count_truncated:
        # (the cache is shared: the batches read what this pass stored)
        if verbose:  # the pass encodes every text: minutes for a large split, shown
            progress = console.progress_bar(None if drop_empty else raw, "text", verbose)
            cut = texts = 0
            for flags in ds.map(lambda ids, label, cut: cut).batch(4096).as_numpy_iterator():
                cut, texts = cut + int(flags.sum()), texts + len(flags)
                progress.add(len(flags))
            console.finish(progress, texts)
        else:
            cut, texts = ds.reduce((np.int64(0), np.int64(0)),
                                   lambda counts, element: (counts[0] + tf.cast(element[2], tf.int64), counts[1] + 1))
        counts = Truncation(int(cut), int(texts))
    ds = ds.map(lambda ids, label, cut: (ids, label))
    if first_epoch is None:
        if shuffle:
            ds = ds.shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
        ds = distribute.prefetched(distribute.even_batches(bucket_batches(ds, batch_size, boundaries), replicas))
        return (ds, counts) if count_truncated else ds

    def one_pass(epoch):
        # The cache above is shared by every pass: the texts are encoded once. The count is
        # given to even_batches: without it, its Python test of the cardinality became an
        # autograph tf.cond inside this traced function, which failed (replicas > 1).
        shuffled = ds.shuffle(10_000, seed=distribute.epoch_seed(seed, epoch)) if shuffle else ds
        return distribute.even_batches(bucket_batches(shuffled, batch_size, boundaries), replicas, batches)

    # Any order has the same batches (see `first_epoch`): those of the texts as they come.
    batches = count_batches(distribute.even_batches(bucket_batches(ds, batch_size, boundaries), replicas), verbose)
    if batches == 0:  # (an epoch of no batch: nothing to train on)
        raise InputError("the training texts give no batch: none holds a token" + (
            "" if replicas == 1 else f", or every bucket of lengths holds fewer than the {replicas} replicas' texts"))
    stream = distribute.prefetched(distribute.epoch_stream(one_pass, batches, first_epoch))
    return ((stream, batches), counts) if count_truncated else (stream, batches)


def with_cardinality(dataset, verbose=0):
    """The dataset with its number of elements counted once and asserted.

    Length bucketing hides how many batches an epoch has; the count is the same every
    epoch (each bucket holds the same examples), so one pass over the data lets
    Keras show complete progress bars and plan epochs without running dry. With a
    ``cache()`` in the pipeline, this pass also fills the cache. ``verbose``: as
    :func:`count_batches`'s.
    """
    return dataset.apply(tf.data.experimental.assert_cardinality(count_batches(dataset, verbose)))


def count_batches(dataset, verbose=0):
    """The number of elements of a finite ``dataset``, counted by one pass over it.
    ``verbose``: 1 or 2 shows a progress bar of the batches counted; 0 (default) is
    silent; another value is refused with an ``InputError`` before the pass
    (:func:`applications.checks.verbosity`)."""
    if checks.verbosity(verbose):  # ("no" showed the progress bar)
        progress = console.progress_bar(None, "batch", verbose)
        count = 0
        for _ in dataset.map(lambda *element: 0).as_numpy_iterator():
            count += 1
            progress.add(1)
        console.finish(progress, count)
        return count
    return int(dataset.reduce(np.int64(0), lambda n, _: n + 1))


# ---------------------------------------------------------------------- datasets


def _check_dataset(name):
    if name not in DATASETS:
        raise InputError(f"`dataset` must be one of {DATASETS}. Received: dataset={name!r}")


def num_classes(name):
    _check_dataset(name)
    if name in TFDS_DATASETS:
        return TFDS_DATASETS[name][2]
    return 5 if SST_DATASETS[name] == "5" else 2


#: with ``hold_out``, the TFDS sets (which have no validation split) train on the first
#: nine tenths of their training split and validate on the last tenth
HELD_OUT_SPLITS = ("train[:90%]", "train[90%:]")


def splits(name, hold_out=False):
    """``(train, validation, test)`` split names.

    SST validates on its dev split. The TFDS sets have none: they validate on their
    test split, or, with ``hold_out`` (what model selection needs, so that the test
    split never takes part in a choice), on the last tenth of their training split,
    which they then train without (:data:`HELD_OUT_SPLITS`).
    """
    _check_dataset(name)
    if name in TFDS_DATASETS:
        return (*HELD_OUT_SPLITS, "test") if hold_out else ("train", "test", "test")
    return ("train", "dev", "test")


def require_data(name, data_dir=None):
    """Checks, without any download, that dataset ``name`` can be read from ``data_dir``.

    TFDS sets must be prepared in ``data_dir`` (see
    ``applications.tfds_data.require_prepared``); SST needs the folder of its tree files.

    Raises:
        DataNotFoundError: (a ``FileNotFoundError``) with a one-line message.
    """
    _check_dataset(name)
    from applications import tfds_data
    from applications.errors import DataNotFoundError

    if name in TFDS_DATASETS:
        tfds_data.require_prepared(TFDS_DATASETS[name][0], data_dir)
        return
    if data_dir is None:
        raise DataNotFoundError(f"{name} needs --data-dir: the folder of the SST tree files "
                                "train.txt, dev.txt and test.txt")
    from applications import sst_trees

    sst_trees.require_split_files(data_dir, splits(name))


def unescape_csv_text(texts):
    """Texts of Zhang et al.'s CSV files as written: ``\\n`` (a backslash and an "n")
    is a line break (read as a space) and ``""`` a quote. A string tensor in, one of the
    same shape out."""
    texts = tf.strings.regex_replace(texts, r"\\n", " ")
    return tf.strings.regex_replace(texts, '""', '"')


def _tfds_split(name, split, data_dir, download):
    from applications import tfds_data

    builder, fields, _ = TFDS_DATASETS[name]
    # (tfds.load directly: data not prepared in data_dir was TFDS' raw AssertionError
    # "could not find data", not the command line's one-line DataNotFoundError)
    ds = tfds_data.load(builder, data_dir, download, split=split, shuffle_files=False)

    def to_pair(example):
        text = tf.strings.join([example[f] for f in fields], separator=" ")
        if name in CSV_ESCAPED_DATASETS:
            text = unescape_csv_text(text)
        return text, tf.cast(example["label"], tf.int32)

    return ds.map(to_pair, num_parallel_calls=tf.data.AUTOTUNE)


def check_phrases(name, phrases):
    """``phrases`` as a bool: True or False, and True only for an SST dataset.

    Raises:
        InputError (a ValueError): ``phrases`` not True or False (``"no"`` was taken as
            True), or True for a TFDS dataset.
    """
    phrases = checks.true_or_false("phrases", phrases)
    if phrases and name in TFDS_DATASETS:
        raise InputError(f"`phrases=True` exists for SST only. Received: dataset={name!r}")
    return phrases


def load_split(name, split, data_dir=None, phrases=False, limit=None, download=False):
    """A raw split as a ``tf.data.Dataset`` of ``(text string, label int32)``.

    Args:
        name: one of :data:`DATASETS` (``ag_news``, ``yelp_polarity``, ``sst2``, ``sst5``).
        split: ``"train"`` or ``"test"`` (and ``"dev"`` for SST); a TFDS split string
            such as ``"train[:10%]"`` is also accepted for the TFDS sets.
        data_dir: TFDS data directory, or the directory of the SST tree files
            (``train.txt``, ``dev.txt``, ``test.txt``; required for SST).
        phrases: SST only: every distinct labelled phrase of the split's trees
            instead of the root sentences (more training data).
        limit: keep only the first ``limit`` examples (a positive integer; None: all).
        download: let TFDS download and prepare a missing dataset.

    Returns:
        The dataset (unbatched).

    Raises:
        DataNotFoundError: without ``download``, a TFDS set is not prepared in
            ``data_dir`` (one line naming the folder and how to prepare it, as the
            command line says it: ``applications.tfds_data.load``).
    """
    _check_dataset(name)
    phrases = check_phrases(name, phrases)
    if limit is not None:  # (limit=-1 dropped the last SST example, and kept every TFDS one)
        limit = integer_at_least("limit", limit, 1)
    if name in TFDS_DATASETS:
        ds = _tfds_split(name, split, data_dir, download)
    else:
        from applications import sst_trees

        if data_dir is None:
            raise InputError("SST needs `data_dir`, the folder of train.txt / dev.txt / test.txt")
        texts, labels = sst_trees.load_split(data_dir, split, SST_DATASETS[name], phrases=phrases)
        if limit is not None:
            texts, labels = texts[:limit], labels[:limit]
        ds = tf.data.Dataset.from_tensor_slices(
            (tf.constant(texts, dtype=tf.string), tf.constant(np.asarray(labels, "int32")))
        )
    if limit is not None:
        ds = ds.take(limit)
    return ds


__all__ = [
    "DATASETS",
    "HELD_OUT_SPLITS",
    "MAX_LENGTH",
    "OOV_ID",
    "PAD_ID",
    "bucket_batches",
    "build_vocabulary",
    "count_batches",
    "with_cardinality",
    "encode",
    "load_split",
    "load_vocabulary",
    "make_dataset",
    "make_lookup",
    "num_classes",
    "preprocess",
    "require_data",
    "save_vocabulary",
    "splits",
    "Truncation",
    "unescape_csv_text",
]
