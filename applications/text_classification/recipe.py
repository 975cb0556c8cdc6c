"""Training recipe for the capsule text classifier (Adam, batch 30, margin + focal loss).

    python -m applications.text_classification --dataset sst2 \\
        --data-dir ../shared/data/sst --routing kmeans --epochs 10 --run-dir runs/sst2

A run directory receives ``model.keras`` (saved atomically), ``vocab.txt``,
``history.png``, ``metrics.json`` and TensorBoard logs under ``logs/``.
"""

import argparse
import json
import os

import keras

from applications import arguments, checks, console, distribute, training
from applications.demo import plot_history, save_atomically
from applications.text_classification import data as data_lib
from applications.text_classification import model as model_lib
from applications.errors import InputError, PathNotFoundError, create_run_dir, leaves_no_empty_run_dir
from applications.shared_data import only_files


def prepare_data(dataset="sst2", data_dir=None, batch_size=30, vocab_size=60000, max_length=data_lib.MAX_LENGTH,
                 phrases=False, limit=None, seed=0, test=True, hold_out=False, verbose=0, replicas=1,
                 first_epoch=None):
    """The vocabulary and the batched splits that :func:`train` trains and tests on.

    The vocabulary is the ``vocab_size`` most frequent tokens of the training split;
    batches are bucketed by length, and counted once (see ``data.with_cardinality``).
    The training batches are cut for ``replicas`` replicas in sync before they are
    counted (``distribute.even_batches``).

    ``first_epoch``: None (default): ``train`` is one epoch of the training batches,
    reshuffled by ``tf.data`` each time it is iterated. An epoch number ``k``: ``train``
    is the endless stream of the epochs ``k, k + 1, ...``, epoch ``e`` shuffled by
    ``(seed, e)`` (``data.make_dataset``'s ``first_epoch``): train on it with
    ``fit(train, steps_per_epoch=train_batches)``, so that a run resumed at epoch ``k``
    trains on the orders of the uninterrupted run (what :func:`train` does).

    Returns:
        A dict: ``vocabulary`` (words), ``vocab_size`` (ids, padding and OOV
        included), ``num_classes``, ``lookup`` (the ``keras.layers.StringLookup`` of
        the vocabulary), ``train_texts`` (the training split's raw ``(text, label)``
        dataset, unbatched, that the vocabulary was counted on: a search batches it anew
        for every trial), ``train_batches`` (the training batches of an epoch), and the
        datasets ``train`` (shuffled; see ``first_epoch``),
        ``validation`` and, with ``test``, ``test`` (the same dataset when a TFDS set
        validates on its test split). With ``hold_out`` a TFDS set validates on a
        held-out tenth of its training split instead (``data.splits``), as model
        selection (``tuning.text_classification``) needs. ``truncated``: for each of
        those datasets (by the same key), a ``data.Truncation``: how many of its texts
        are longer than ``max_length`` tokens (cut), of how many.

    ``verbose``: 1 or 2 shows a line and a progress bar for each pass over the data (the
    vocabulary, then each split encoded and counted: minutes for a large set, before
    the first epoch); 0 (default) is silent. Another value is refused with an
    ``InputError`` before any text is read (:func:`applications.checks.verbosity`).
    """
    verbose = checks.verbosity(verbose)  # ("no" showed the lines and the progress bars)
    # (a global batch smaller than the replicas left no training batch: nothing trained)
    replicas = distribute.check_replicas(replicas, batch_size)
    train_split, val_split, test_split = data_lib.splits(dataset, hold_out)

    def raw(split, **kwargs):
        return data_lib.load_split(dataset, split, data_dir, limit=limit, **kwargs)

    train_raw = raw(train_split, phrases=phrases)
    if verbose:
        print(f"{dataset}: the vocabulary of the {train_split} split")
    vocabulary = data_lib.build_vocabulary(train_raw, max_size=vocab_size, max_length=max_length, verbose=verbose)
    lookup = data_lib.make_lookup(vocabulary)

    truncated = {}

    def batches(key, ds, shuffle, replicas=1):
        if verbose:
            print(f"{dataset}: encoding the {key} texts, then counting their batches")
        batched, truncated[key] = data_lib.make_dataset(ds, lookup, batch_size, shuffle=shuffle, seed=seed,
                                                        max_length=max_length, count_truncated=True, verbose=verbose)
        return data_lib.with_cardinality(distribute.even_batches(batched, replicas), verbose=verbose)

    validation = batches("validation", raw(val_split), False)
    if first_epoch is None:
        train = batches("train", train_raw, True, replicas)
        train_batches = int(train.cardinality())
    else:
        if verbose:
            print(f"{dataset}: encoding the train texts, then counting their batches")
        (train, train_batches), truncated["train"] = data_lib.make_dataset(
            train_raw, lookup, batch_size, shuffle=True, seed=seed, max_length=max_length, count_truncated=True,
            verbose=verbose, first_epoch=first_epoch, replicas=replicas)
    data = {
        "vocabulary": vocabulary,
        "vocab_size": int(lookup.vocabulary_size()),
        "num_classes": data_lib.num_classes(dataset),
        "lookup": lookup,
        "train_texts": train_raw,
        "train": train,
        "train_batches": train_batches,
        "validation": validation,
    }
    if test:
        if test_split == val_split:
            data["test"], truncated["test"] = validation, truncated["validation"]
        else:
            data["test"] = batches("test", raw(test_split), False)
    data["truncated"] = {key: truncated[key] for key in ("train", "validation", "test") if key in truncated}
    return data


def truncation_line(max_length, truncated):
    """The console line of how many texts of each split ``max_length`` cuts.

    ``truncated``: ``{split: data.Truncation}`` (as :func:`prepare_data` gives).
    """
    counts = ", ".join(f"{split} {n.truncated:,} of {n.texts:,}" for split, n in truncated.items())
    line = f"texts longer than --max-length {max_length:,} tokens (cut to their first {max_length:,}): {counts}"
    if any(n.truncated for n in truncated.values()):
        line += "; a larger --max-length keeps them whole"
    return line


@leaves_no_empty_run_dir()
@arguments.trains_under_precision
def train(
    dataset="sst2",
    data_dir=None,
    run_dir="runs/text_classification",
    routing="kmeans",
    embedding="compositional",
    epochs=10,
    batch_size=30,
    learning_rate=1e-3,
    vocab_size=60000,
    max_length=data_lib.MAX_LENGTH,
    phrases=False,
    limit=None,
    seed=0,
    jit_compile="auto",
    callbacks=None,
    verbose=1,
    strategy=None,
    precision=None,
    **model_kwargs,
):
    """Trains a classifier on one dataset and writes its outputs to ``run_dir``.

    Args:
        dataset: one of ``applications.text_classification.data.DATASETS``.
        data_dir: TFDS data directory, or the SST tree-file directory.
        run_dir: output directory.
        routing: ``"kmeans"``, ``"dynamic"`` or ``"linear"``.
        embedding: ``"compositional"`` or ``"standard"``.
        epochs: training epochs.
        batch_size: sequences per batch (the paper: 30).
        learning_rate: Adam's learning rate.
        vocab_size: largest id space (padding and OOV included); the vocabulary of
            the training split is cut to it.
        max_length: tokens kept per text (the paper: 5,000).
        phrases: SST: train on every labelled phrase, not only on the sentences.
        limit: use only the first ``limit`` examples of every split (quick runs), the
            test split included; ``metrics.json`` records it (``"limit"``, null for all):
            :func:`evaluate` scores the same first test examples by default.
        seed: random seed (weights, dropout, shuffling).
        jit_compile: passed to ``model.compile``.
        callbacks: extra Keras callbacks for ``fit`` (a ``fault_tolerance.StopOnDivergence``
            and TensorBoard are always added);
            the backup of a ``fault_tolerance.AtomicBackupAndRestore`` among them is
            deleted once the outputs are written (``fault_tolerance.finish_run``). A run
            that resumes from such a backup at epoch ``k`` trains epochs ``k, k + 1, ...``
            on the orders the uninterrupted run had (``prepare_data``'s ``first_epoch``).
            The backup records the SST tree files' fingerprint (``fault_tolerance.record_data``):
            a resume on other files is refused, one on the same files moved is not.
        verbose: 0 silent, 1 progress bars and summary lines; 2 the same, with ``fit``'s
            line per epoch instead of its progress bar (Keras' levels; Python or numpy,
            not a bool).
        strategy: a ``tf.distribute.Strategy``: the model is built and compiled in its
            scope (``batch_size`` is then the global batch). None: the default one.
        precision: ``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``, the Keras
            dtype policy the run builds, trains and saves its model under (its outputs in
            float32); None (the default): the global one. See
            ``applications.arguments.trains_under_precision``.

    Returns:
        A dict of the results (test accuracy, parameter counts, the number of texts of
        each split cut at ``max_length`` tokens: ``truncated_texts``, output paths, ...).

    Raises:
        InputError: (a ``ValueError``) an unknown ``dataset``, or a number out of its
            range (``epochs``, ``batch_size``, ``limit`` below 1, a ``learning_rate`` not
            > 0, a ``verbose`` not 0, 1 or 2, ...), in one line, before the run directory
            is made or any text is read.
    """

    from applications import fault_tolerance
    from applications.fault_tolerance import atomic_write

    # Refuse bad model options before minutes of data preparation, not after.
    model_lib.check_arguments(routing=routing, embedding=embedding, **model_kwargs)
    # by their own names, before the run directory is made (vocab_size=2 was refused as
    # "`max_size`", max_length=0 as a StagingError traceback from inside tf.data)
    checks.integer_at_least("vocab_size", vocab_size, 3)
    checks.integer_at_least("max_length", max_length, 1)
    # and the recipe's other numbers (epochs=0 saved and scored an untrained model as a
    # finished run; limit=-1 trained and tested without the last SST example of each split)
    checks.integer_at_least("epochs", epochs, 1)
    checks.integer_at_least("batch_size", batch_size, 1)
    checks.learning_rate(learning_rate)
    if limit is not None:
        checks.integer_at_least("limit", limit, 1)
    data_lib.num_classes(dataset)  # an unknown dataset, before the run directory is made
    data_lib.check_phrases(dataset, phrases)  # (phrases="no" trained on every phrase)
    seed = checks.integer_at_least("seed", seed, 0)  # (-1 and 1.5 were Keras' errors from set_random_seed)
    # ("no" and -1 were taken by fit, which hid its progress, and showed the data passes')
    verbose = checks.verbosity(verbose)
    callbacks = checks.callback_list(callbacks)  # (None: none; [*None] was a TypeError after the run directory)
    strategy = distribute.resolve_strategy(strategy)
    keras.utils.set_random_seed(seed)
    create_run_dir(run_dir)
    # the SST tree files' fingerprint (TFDS sets: none), recorded: evaluate compares it
    fingerprint = checks.data_fingerprint("text_classification", data_dir=data_dir, dataset=dataset)
    # the backups of a Python call record the tree files as the command line's do: a run resumed
    # on other SST files is refused before anything is trained (it resumed on them)
    fault_tolerance.record_data(callbacks, data_fingerprint=fingerprint)
    # the epochs a resumed run trains are shuffled as the uninterrupted run's (distribute.epoch_stream)
    data = prepare_data(dataset, data_dir, batch_size, vocab_size, max_length, phrases, limit, seed,
                        verbose=verbose, replicas=strategy.num_replicas_in_sync,
                        first_epoch=fault_tolerance.resume_epoch(callbacks, epochs))
    n_ids, n_classes = data["vocab_size"], data["num_classes"]
    if verbose:  # (the default 5,000 tokens cut long reviews without a word)
        shown = {split: n for split, n in data["truncated"].items()
                 if not (split == "validation" and data["validation"] is data["test"])}
        print(truncation_line(max_length, shown))

    with strategy.scope():
        model = model_lib.build_model(n_ids, n_classes, routing=routing, embedding=embedding, **model_kwargs)
        model_lib.compile_model(model, learning_rate, jit_compile=jit_compile)
    if model.jit_compile:  # XLA compiles a step per input shape: lengths rounded up to the buckets'
        padded = {key: xla_lengths(data[key], max_length) for key in ("train", "validation", "test")}
        data = {**data, **padded} if data["validation"] is not data["test"] else {
            **data, **padded, "validation": padded["test"]}
    other = "standard" if embedding == "compositional" else "compositional"
    params = model_lib.parameter_report(n_ids, n_classes, model=model, routing=routing, embedding=embedding,
                                        **model_kwargs)
    if verbose:
        print(
            f"{model.name} on {dataset}: {n_ids:,} ids, {n_classes} classes; parameters "
            f"{params[embedding]['total']:,} (embedding {params[embedding]['embedding']:,}) vs "
            f"{params[other]['total']:,} (embedding {params[other]['embedding']:,}) with a {other} embedding"
        )
    history = model.fit(
        # (a mid-epoch backup's epoch goes on after the steps it had trained)
        distribute.distribute_dataset_options(fault_tolerance.skip_trained_steps(data["train"], callbacks, epochs)),
        steps_per_epoch=data["train_batches"],
        validation_data=data["validation"],
        epochs=epochs,
        verbose=verbose,
        # the stop on divergence: `train` called from Python without the command line's
        # callbacks trained a NaN model to the end, then saved and scored it
        callbacks=[fault_tolerance.StopOnDivergence(run_dir), keras.callbacks.TensorBoard(os.path.join(run_dir, "logs")),
                   *(callbacks or [])], shuffle=False,
    )
    test_loss, test_accuracy = model.evaluate(data["test"], verbose=0)
    paths = {
        "model": os.path.join(run_dir, "model.keras"),
        "vocabulary": os.path.join(run_dir, "vocab.txt"),
        "plot": os.path.join(run_dir, "history.png"),
        "metrics": os.path.join(run_dir, "metrics.json"),
        "logs": os.path.join(run_dir, "logs"),
    }
    save_atomically(model, paths["model"])
    atomic_write(paths["vocabulary"], lambda tmp: data_lib.save_vocabulary(data["vocabulary"], tmp))
    plot_history(fault_tolerance.logged_history(history, callbacks)[0], paths["plot"])
    result = {
        "dataset": dataset,
        "epochs_run": fault_tolerance.epochs_run(history, callbacks),  # those before a resume too
        "routing": routing,
        "embedding": embedding,
        "test_accuracy": float(test_accuracy),
        "test_loss": float(test_loss),
        "epochs": epochs,
        "vocab_size": int(n_ids),
        "max_length": max_length,  # evaluate cuts the texts as training did by default
        "limit": limit,  # and scores the same first test examples (None: all)
        # of the same SST tree files (checks.recorded_data; None: a TFDS set)
        **({"data_fingerprint": fingerprint} if fingerprint else {}),
        # texts of each split longer than max_length tokens, cut to it
        "truncated_texts": {split: n.truncated for split, n in data["truncated"].items()},
        "parameters": params,
        **paths,
    }
    fault_tolerance.write_metrics_json(result, paths["metrics"])
    fault_tolerance.finish_run(callbacks)  # the outputs are written: the backup goes
    if verbose:
        print(f"test accuracy {test_accuracy:.4f}; outputs in {os.path.abspath(run_dir)}")
    return result


def evaluate(model_path, dataset=None, data_dir=None, vocabulary_path=None, limit=None, batch_size=30,
             max_length=None, strategy=None, verbose=0):
    """Test loss and accuracy of a saved model on ``dataset``'s test split.

    ``dataset`` (None) defaults to the one :func:`train` recorded in ``metrics.json``
    beside the model (:func:`recorded_dataset`), else ``"sst2"``; a given one wins (one
    of another number of classes than the model's is refused in one line). For the SST
    sets, ``data_dir`` (None) defaults likewise to the folder of the tree files recorded
    there (:func:`recorded_data_dir`); a folder that is not there is refused in one line.
    Texts are encoded with the vocabulary the model was trained with: ``vocab.txt``
    beside the model (as :func:`train` writes it) unless ``vocabulary_path`` is given.
    Each keeps its first ``max_length`` tokens; None (the default): the ``max_length``
    :func:`train` recorded in ``metrics.json`` beside the model (else ``MAX_LENGTH``), so
    that ``evaluate`` scores what ``train`` scored. ``limit`` (None: every test example)
    defaults likewise to the one recorded there, else all: a model trained with a
    ``limit`` is scored on the first test examples that ``train`` scored. A given ``limit``
    wins; one at least the test split's size scores all of it.

    For the SST sets, the test tree file of ``data_dir`` is checked against the one
    :func:`train` recorded (``checks.recorded_data``): one that changed in the run's
    folder is refused (``InputError``), the same file elsewhere is the run's, another one
    elsewhere is scored, with a note on stderr that this is not the run's test score.

    ``verbose``: 1 shows Keras' progress bars and the line of how many texts were cut
    at ``max_length`` (:func:`truncation_line`), on stderr (stdout keeps only the
    result); 2 the same, with Keras' one line at the end instead of its bar; 0 (the
    default) is silent. Another value is refused with an ``InputError`` before the model
    is loaded (:func:`applications.checks.verbosity`). The result holds that count too:
    ``truncated_texts`` (``{"test": n}``), with the ``max_length`` used.
    """

    verbose = checks.verbosity(verbose)  # ("no" and -1 were taken by Keras' evaluate, after the model was loaded)
    if limit is not None:  # limit=-1 cut the last SST sentence (texts[:-1]) and kept every TFDS example
        limit = checks.integer_at_least("limit", limit, 1)
    # (checked where the test batches were made, after the vocabulary and the test split were read)
    batch_size = checks.integer_at_least("batch_size", batch_size, 1)
    if not os.path.exists(model_path):
        raise PathNotFoundError(f"no model at {model_path!r}: train one first with `keras-capsules train`")
    vocabulary_path = vocabulary_path or os.path.join(os.path.dirname(os.path.abspath(model_path)), "vocab.txt")
    if not os.path.exists(vocabulary_path):
        raise PathNotFoundError(f"no vocabulary at {vocabulary_path!r}: pass the vocab.txt written by `train`")
    if dataset is None:  # (the default sst2 refused a model of sst5 or ag_news unless told --dataset)
        dataset = recorded_dataset(model_path)
    explicit = data_dir is not None
    if data_dir is None:  # SST's folder that train read (evaluate needed --data-dir again)
        data_dir = recorded_data_dir(model_path, dataset)
        if dataset in data_lib.SST_DATASETS:  # none recorded, or moved or deleted since: one line
            data_lib.require_data(dataset, data_dir)
    if max_length is None:  # (the default 5,000 scored a model trained on 20 tokens a text on 5,000)
        max_length = _recorded_max_length(model_path)
    if limit is None:  # (every test example was scored, other ones than train scored and reported)
        limit = checks.recorded_integers(model_path, ("limit",), minimum=1).get("limit")
    strategy = distribute.resolve_strategy(strategy)
    lookup = data_lib.make_lookup(data_lib.load_vocabulary(vocabulary_path))
    test_split = data_lib.splits(dataset)[2]
    raw = data_lib.load_split(dataset, test_split, data_dir, limit=limit)
    # SST's test tree file changed in the run's folder: refused; another folder's: scored, with a note
    checks.recorded_data(model_path, only_files(checks.data_fingerprint(
        "text_classification", data_dir=data_dir, dataset=dataset), [f"{test_split}.txt"]), explicit)
    test, truncated = data_lib.make_dataset(raw, lookup, batch_size, max_length=max_length, count_truncated=True)
    test = data_lib.with_cardinality(test)
    with strategy.scope():
        model = checks.load_model(model_path)
    _check_classifier(model, model_path, int(lookup.vocabulary_size()), vocabulary_path)
    n_classes = data_lib.num_classes(dataset)
    if int(model.output.shape[-1]) != n_classes:
        raise InputError(f"the model has {model.output.shape[-1]} classes but {dataset} has {n_classes}: "
                         "pass the --dataset it was trained on")
    if not model.compiled:  # saved uncompiled (build_model, then save): Keras' "You must call `compile()`"
        with strategy.scope():
            model_lib.compile_model(model)
    if model.jit_compile:  # (see xla_lengths)
        test = xla_lengths(test, max_length)
    with console.progress_on_stderr(verbose):
        if verbose:
            print(truncation_line(max_length, {"test": truncated}))
        loss, accuracy = model.evaluate(test, verbose=verbose)
    return {"test_accuracy": float(accuracy), "test_loss": float(loss), "model": model_path,
            "max_length": max_length, "truncated_texts": {"test": truncated.truncated}}


def xla_lengths(dataset, max_length):
    """``dataset``'s id batches padded (with ``PAD_ID``) to the next bucket boundary of
    ``data.DEFAULT_BOUNDARIES`` below ``max_length``, or to ``max_length``: for a model
    compiled with XLA, which compiles its steps once per input shape (batches padded to
    their longest text came in every length up to ``max_length``: a compilation at each
    new one, epoch after epoch). See ``training.pad_to_lengths``."""
    lengths = [b for b in data_lib.DEFAULT_BOUNDARIES if b < max_length] + [max_length]
    return training.pad_to_lengths(dataset, lengths, value=data_lib.PAD_ID)


def recorded_dataset(model_path):
    """The ``dataset`` :func:`train` recorded in ``metrics.json`` beside the model (one of
    ``data.DATASETS``), else ``"sst2"`` (a model moved from its run directory)."""
    dataset = checks.recorded_metrics(model_path).get("dataset")
    return dataset if isinstance(dataset, str) and dataset in data_lib.DATASETS else "sst2"


def recorded_data_dir(model_path, dataset):
    """The folder of the SST tree files :func:`train` (or a search) read, as recorded in
    ``metrics.json`` beside the model (``checks.recorded_data_folder``), when ``dataset``
    is an SST set; else None (a TFDS set, whose ``data_dir`` is a location only, or
    nothing recorded)."""
    if dataset not in data_lib.SST_DATASETS:
        return None
    from applications.sst_trees import FINGERPRINT_KIND

    return checks.recorded_data_folder(model_path, FINGERPRINT_KIND)


def _recorded_max_length(model_path):
    """The ``max_length`` :func:`train` recorded in ``metrics.json`` beside the model, else
    ``data.MAX_LENGTH`` (a run of an older version, or a model moved from its run directory)."""
    return checks.recorded_integers(model_path, ("max_length",), minimum=1).get("max_length", data_lib.MAX_LENGTH)


def _check_classifier(model, model_path, vocab_size, vocabulary_path):
    """Refuses a model that :func:`build_model` did not make, or a vocabulary not its own.

    A vocabulary of another size gave ids past the model's embedding (a graph
    execution error from inside the model) or, smaller, silently read every word as
    another one.
    """
    embedding = next((layer for layer in model.layers if layer.name == "embedding"), None)
    checks.require_model(
        model, model_path,
        lambda shapes, model: len(shapes) == 1 and len(shapes[0]) == 2 and embedding is not None
        and isinstance(getattr(embedding, "input_dim", None), int)
        and len(checks.single_output_shape(model) or ()) == 2,
        "a text classifier", "text_classification", "token ids [batch, length] in, class scores out",
    )
    if embedding.input_dim != vocab_size:
        raise InputError(
            f"the model embeds {embedding.input_dim} ids (padding and OOV included) but the vocabulary "
            f"{vocabulary_path} gives {vocab_size}: pass the vocab.txt written with the model. "
            f"Received: vocab_size={vocab_size} ({vocab_size - 2} words)"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m applications.text_classification", description=__doc__.split("\n")[0])
    from applications.arguments import positive_float, positive_int, seed_int

    parser.add_argument("--dataset", default="sst2", choices=data_lib.DATASETS)
    parser.add_argument("--data-dir", default=None, help="TFDS data dir, or the SST tree-file folder")
    parser.add_argument("--run-dir", default=os.path.join("runs", "text_classification"))
    parser.add_argument("--routing", default="kmeans", choices=model_lib.ROUTINGS)
    parser.add_argument("--embedding", default="compositional", choices=model_lib.EMBEDDINGS)
    parser.add_argument("--epochs", type=positive_int, default=10)
    parser.add_argument("--batch-size", type=positive_int, default=30)
    parser.add_argument("--learning-rate", type=positive_float, default=1e-3)
    parser.add_argument("--vocab-size", type=positive_int, default=60000)
    parser.add_argument("--phrases", action="store_true", help="SST: train on every labelled phrase")
    parser.add_argument("--limit", type=positive_int, default=None)
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    from applications.text_classification.cli import INTRA_OP_THREADS

    distribute.set_intra_op_threads(INTRA_OP_THREADS)  # as the command line; before the first op
    result = train(
        dataset=args.dataset,
        data_dir=args.data_dir,
        run_dir=args.run_dir,
        routing=args.routing,
        embedding=args.embedding,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        vocab_size=args.vocab_size,
        phrases=args.phrases,
        limit=args.limit,
        seed=args.seed,
        verbose=0 if args.quiet else 1,
    )
    print(json.dumps({k: result[k] for k in ("test_accuracy", "parameters")}, indent=2))
    return 0
